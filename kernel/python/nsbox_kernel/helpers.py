"""The helpers preloaded in every cell: nsbox_helpers' (run_tool and run_composio_tool,
invoke_llm, upload_local_file, proxy_execute, web_search, smart_file_extract), which
reach the tool bridge through the kernel's channel rather than the bridge socket, so
that the supervisor knows which cell made each call; and set_progress, which reports a
long cell's progress."""
import nsbox_helpers
from nsbox_helpers import transport


class Helpers:
    def __init__(self, channel, current_cell):
        self._channel = channel
        self._current_cell = current_cell  # a callable giving the running cell's number
        transport.install(self._bridge)

    def _bridge(self, helper, args):
        try:
            return self._channel.call("helper", name=helper, args=args)
        except Exception as e:  # the channel broke under us
            return {"result": None, "error": f"{helper}: {e}"}

    def set_progress(self, current_step, current_step_metric=None):
        """Reports progress of a long cell: set_progress("FETCHING_EMAILS", "10/100 emails")."""
        self._channel.send({"event": "progress", "cell": self._current_cell(),
                            "current_step": str(current_step),
                            "current_step_metric": None if current_step_metric is None else str(current_step_metric)})

    def install(self, namespace):
        for name in nsbox_helpers.__all__:
            namespace[name] = getattr(nsbox_helpers, name)
        namespace["set_progress"] = self.set_progress
