"""Bucket mount entries (S3, GCS, R2, Azure Blob), mapped to the create request's "mounts"."""
from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Dict, Optional, Tuple

from .entry_base import _Entry
from .errors import MountConfigError


class _Mount(_Entry):
    """A bucket mount entry. ``mount_path``: None → the entry's path under the manifest's
    root; relative → under the root; absolute → as given. ``read_only`` by default. The
    ``mount_strategy`` of the SDK (helpers run inside a container) does not apply: nsbox
    serves mounts from the host; an rclone pattern asks for nsbox's rclone strategy, a
    string (``builtin``, ``rclone``, ``s3fs``) names one."""

    kind = ""
    # Fields that hold secrets: sent in the create request's "credentials", never kept.
    _secret_fields: Tuple[str, ...] = ()
    # What identifies the mount, in the SDK's names (kept when serialized).
    _public_fields: Tuple[str, ...] = ()

    def __init__(self, *, mount_path: Optional[str] = None, read_only: bool = True, ephemeral: bool = True,
                 mount_strategy: Any = None, **kwargs: Any) -> None:
        super().__init__(ephemeral=True, **kwargs)
        self.mount_path = mount_path
        self.read_only = read_only
        self.mount_strategy = mount_strategy

    def strategy_name(self) -> str:
        s = self.mount_strategy
        if s is None:
            return "builtin"
        if isinstance(s, str):
            return s
        pattern = getattr(s, "pattern", None)
        if pattern is not None and type(pattern).__name__.lower().startswith("rclone"):
            return "rclone"
        return "builtin"

    def target(self, key: str, root: PurePosixPath) -> str:
        if self.mount_path is None:
            return str(root / key)
        p = str(self.mount_path)
        return p if p.startswith("/") else str(root / p)

    def _fields(self) -> Dict[str, Any]:
        raise NotImplementedError

    def _credentials(self) -> Dict[str, str]:
        raise NotImplementedError

    def request(self, key: str, root: PurePosixPath) -> Dict[str, Any]:
        """The create request's mount object (with credentials)."""
        out = self._fields()
        out["mount_path"] = self.target(key, root)
        out["read_only"] = bool(self.read_only)
        out["strategy"] = self.strategy_name()
        creds = self._credentials()
        if creds:
            out["credentials"] = creds
        return out

    def topology(self, key: str, root: PurePosixPath) -> Dict[str, Any]:
        """What identifies the mount without its secrets (resume compares these)."""
        out = self._fields()
        out["mount_path"] = self.target(key, root)
        out["read_only"] = bool(self.read_only)
        out["strategy"] = self.strategy_name()
        return out

    def to_dict(self) -> Dict[str, Any]:
        """The entry in the SDK's field names, without its secrets (what a serialized
        session state keeps; ``_coerce_entry`` reads it back)."""
        out: Dict[str, Any] = {"type": self.type}
        for name in self._public_fields:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.mount_path is not None:
            out["mount_path"] = self.mount_path
        out["read_only"] = bool(self.read_only)
        out["mount_strategy"] = self.strategy_name()
        return out


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != ""}


class S3Mount(_Mount):
    type = "s3_mount"
    kind = "s3"
    _secret_fields = ("access_key_id", "secret_access_key", "session_token")
    _public_fields = ("bucket", "prefix", "region", "endpoint_url", "s3_provider")

    def __init__(self, bucket: str, *, access_key_id: Optional[str] = None, secret_access_key: Optional[str] = None,
                 session_token: Optional[str] = None, prefix: Optional[str] = None, region: Optional[str] = None,
                 endpoint_url: Optional[str] = None, s3_provider: str = "AWS", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.session_token = session_token
        self.prefix = prefix
        self.region = region
        self.endpoint_url = endpoint_url
        self.s3_provider = s3_provider

    def _fields(self) -> Dict[str, Any]:
        return _drop_none({"type": "s3", "bucket": self.bucket, "prefix": self.prefix, "region": self.region,
                           "endpoint_url": self.endpoint_url})

    def _credentials(self) -> Dict[str, str]:
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise MountConfigError(message="S3 mount credentials need both access_key_id and secret_access_key",
                                   context={"bucket": self.bucket})
        return _drop_none({"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key,
                           "session_token": self.session_token})


class GCSMount(_Mount):
    """Google Cloud Storage through its S3-compatible XML API, with HMAC keys
    (``access_id`` + ``secret_access_key``); service-account credentials are not
    supported."""

    type = "gcs_mount"
    kind = "gcs"
    _secret_fields = ("access_id", "secret_access_key", "service_account_credentials", "access_token")
    _public_fields = ("bucket", "prefix", "region", "endpoint_url")

    def __init__(self, bucket: str, *, access_id: Optional[str] = None, secret_access_key: Optional[str] = None,
                 prefix: Optional[str] = None, region: Optional[str] = None, endpoint_url: Optional[str] = None,
                 service_account_file: Optional[str] = None, service_account_credentials: Optional[str] = None,
                 access_token: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.access_id = access_id
        self.secret_access_key = secret_access_key
        self.prefix = prefix
        self.region = region
        self.endpoint_url = endpoint_url
        self.service_account_file = service_account_file
        self.service_account_credentials = service_account_credentials
        self.access_token = access_token

    def _fields(self) -> Dict[str, Any]:
        return _drop_none({"type": "gcs", "bucket": self.bucket, "prefix": self.prefix, "region": self.region,
                           "endpoint_url": self.endpoint_url})

    def _credentials(self) -> Dict[str, str]:
        if self.service_account_file or self.service_account_credentials or self.access_token:
            raise MountConfigError(message="nsbox mounts GCS with HMAC keys (access_id, secret_access_key) only",
                                   context={"bucket": self.bucket})
        if bool(self.access_id) != bool(self.secret_access_key):
            raise MountConfigError(message="GCS mount credentials need both access_id and secret_access_key",
                                   context={"bucket": self.bucket})
        return _drop_none({"access_key_id": self.access_id, "secret_access_key": self.secret_access_key})


class R2Mount(_Mount):
    type = "r2_mount"
    kind = "r2"
    _secret_fields = ("access_key_id", "secret_access_key")
    _public_fields = ("bucket", "account_id", "prefix", "endpoint_url", "custom_domain")

    def __init__(self, bucket: str, *, account_id: Optional[str] = None, access_key_id: Optional[str] = None,
                 secret_access_key: Optional[str] = None, custom_domain: Optional[str] = None,
                 prefix: Optional[str] = None, endpoint_url: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.account_id = account_id
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.custom_domain = custom_domain
        self.prefix = prefix
        self.endpoint_url = endpoint_url

    def _fields(self) -> Dict[str, Any]:
        if self.custom_domain:
            raise MountConfigError(message="R2 custom domains are not supported by nsbox mounts; give account_id",
                                   context={"bucket": self.bucket})
        return _drop_none({"type": "r2", "bucket": self.bucket, "account": self.account_id, "prefix": self.prefix,
                           "endpoint_url": self.endpoint_url})

    def _credentials(self) -> Dict[str, str]:
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise MountConfigError(message="R2 mount credentials need both access_key_id and secret_access_key",
                                   context={"bucket": self.bucket})
        return _drop_none({"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key})


class AzureBlobMount(_Mount):
    type = "azure_blob_mount"
    kind = "azure_blob"
    _secret_fields = ("account_key", "sas_token")
    _public_fields = ("account", "container", "endpoint", "prefix")

    def __init__(self, account: str, container: str, *, endpoint: Optional[str] = None,
                 account_key: Optional[str] = None, sas_token: Optional[str] = None,
                 identity_client_id: Optional[str] = None, prefix: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.account = account
        self.container = container
        self.endpoint = endpoint
        self.account_key = account_key
        self.sas_token = sas_token
        self.identity_client_id = identity_client_id
        self.prefix = prefix

    def _fields(self) -> Dict[str, Any]:
        return _drop_none({"type": "azure_blob", "account": self.account, "container": self.container,
                           "prefix": self.prefix, "endpoint_url": self.endpoint})

    def _credentials(self) -> Dict[str, str]:
        if self.identity_client_id:
            raise MountConfigError(message="managed identities are not supported by nsbox mounts; give account_key "
                                           "or sas_token", context={"container": self.container})
        return _drop_none({"account_key": self.account_key, "sas_token": self.sas_token})


_MOUNT_TYPES = {"s3_mount": S3Mount, "gcs_mount": GCSMount, "r2_mount": R2Mount, "azure_blob_mount": AzureBlobMount}
