"""Tests for nsbox_helpers.forgiving (case-style forgiving results and arguments)."""
import ast
import copy
import json
import os
import pickle
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from nsbox_helpers import forgiving  # noqa: E402
from nsbox_helpers.forgiving import (  # noqa: E402
    ForgivingDict,
    correct_arguments,
    forgive,
    key_variants,
    normalise,
)


def warning(missing, real):
    return "nsbox: no key %r in the result; using %r\n" % (missing, real)


@pytest.fixture(autouse=True)
def fresh_warnings():
    forgiving._WARNED.clear()
    yield
    forgiving._WARNED.clear()


# ---------------------------------------------------------------- key_variants


@pytest.mark.parametrize(
    "name, expected",
    [
        ("api_key", ["apiKey", "ApiKey", "api-key", "API_KEY"]),
        ("apiKey", ["api_key", "ApiKey", "api-key", "API_KEY"]),
        ("ApiKey", ["api_key", "apiKey", "api-key", "API_KEY"]),
        ("API_KEY", ["api_key", "apiKey", "ApiKey", "api-key"]),
        ("HTTPStatus", ["http_status", "httpStatus", "HttpStatus", "http-status", "HTTP_STATUS"]),
        ("user-name", ["user_name", "userName", "UserName", "USER_NAME"]),
        ("created_at2", ["createdAt2", "CreatedAt2", "created-at2", "CREATED_AT2"]),
        ("createdAt2", ["created_at2", "CreatedAt2", "created-at2", "CREATED_AT2"]),
        ("HTTP2Status", ["http2_status", "http2Status", "Http2Status", "http2-status", "HTTP2_STATUS"]),
        ("userIDs", ["user_ids", "userIds", "UserIds", "user-ids", "USER_IDS"]),
        ("getHTTPResponseCode", [
            "get_http_response_code", "getHttpResponseCode", "GetHttpResponseCode",
            "get-http-response-code", "GET_HTTP_RESPONSE_CODE",
        ]),
        ("name", ["Name", "NAME"]),
        ("_id", ["_Id", "_ID"]),
        ("", []),
        ("_", []),
    ],
)
def test_key_variants(name, expected):
    assert key_variants(name) == expected


def test_key_variants_excludes_name_and_has_no_duplicates():
    for name in ["id", "ID", "a", "x_y_z", "already_snake", "HTTPStatus", "created_at2"]:
        variants = key_variants(name)
        assert name not in variants
        assert len(variants) == len(set(variants))


def test_normalise_ignores_case_style_only():
    forms = {normalise(n) for n in ["api_key", "apiKey", "ApiKey", "api-key", "API_KEY", "APIKey"]}
    assert forms == {"apikey"}
    assert normalise("_id") != normalise("id")
    assert normalise("api_key") != normalise("api_keys")


# ---------------------------------------------------------------- ForgivingDict


def test_wrong_style_at_top_level(capsys):
    d = forgive({"api_key": "secret", "userName": "ann"})
    assert d["apiKey"] == "secret"
    assert d["user_name"] == "ann"
    assert d.get("ApiKey") == "secret"
    assert d.get("USER_NAME", "default") == "ann"
    err = capsys.readouterr().err
    assert warning("apiKey", "api_key") in err
    assert warning("user_name", "userName") in err


def test_wrong_style_nested_dict_in_list_in_dict():
    result = forgive({"data": {"items": [{"repo_name": "nsbox", "ownerInfo": {"login_name": "me"}}]}})
    assert result["data"]["items"][0]["repoName"] == "nsbox"
    assert result["Data"]["Items"][0]["owner_info"]["loginName"] == "me"
    assert result.get("data").get("items")[0].get("RepoName") == "nsbox"
    assert isinstance(result["data"]["items"][0], ForgivingDict)


def test_wrapping_happens_at_construction():
    plain = {"outer": {"inner_key": [{"deep_key": 1}, ({"in_tuple": 2},)]}}
    d = ForgivingDict(plain)
    assert type(dict.__getitem__(d, "outer")) is ForgivingDict
    inner = dict.__getitem__(dict.__getitem__(d, "outer"), "inner_key")
    assert type(inner) is list
    assert type(inner[0]) is ForgivingDict
    assert type(inner[1]) is tuple and type(inner[1][0]) is ForgivingDict
    assert d["outer"]["innerKey"][1][0]["inTuple"] == 2
    # the input is left alone
    assert type(plain["outer"]) is dict
    assert type(plain["outer"]["inner_key"][0]) is dict


def test_forgive_leaves_other_values_alone():
    assert forgive(5) == 5
    s = "text"
    assert forgive(s) is s
    assert forgive(None) is None
    t = (1, 2, "x")
    assert forgive(t) is t
    assert type(forgive({"a": 1})) is ForgivingDict
    assert forgive([{"a": 1}, 2]) == [{"a": 1}, 2]
    assert type(forgive([{"a": 1}])[0]) is ForgivingDict


def test_forgive_keeps_shared_and_cyclic_references():
    shared = {"k": 1}
    cyclic = {"shared_a": shared, "shared_b": shared}
    cyclic["me"] = cyclic
    d = forgive(cyclic)
    assert d["sharedA"] is d["sharedB"]
    assert d["me"] is d
    assert type(d["me"]) is ForgivingDict


def test_values_set_later_are_wrapped():
    d = ForgivingDict()
    d["user_info"] = {"first_name": "a"}
    d.update({"page_info": {"next_token": "t"}}, extra={"some_key": 1})
    d.setdefault("list_of", [{"item_id": 7}])
    assert d["userInfo"]["firstName"] == "a"
    assert d["pageInfo"]["nextToken"] == "t"
    assert d["extra"]["someKey"] == 1
    assert d["listOf"][0]["itemId"] == 7
    assert type(d.copy()) is ForgivingDict


def test_warning_text_appears_once(capsys):
    d = forgive({"api_key": "secret"})
    other = forgive({"api_key": "other"})
    for _ in range(3):
        assert d["apiKey"] == "secret"
        assert d.get("apiKey") == "secret"
        assert other["apiKey"] == "other"
    err = capsys.readouterr().err
    assert err == "nsbox: no key 'apiKey' in the result; using 'api_key'\n"


def test_exact_keys_do_not_warn(capsys):
    d = forgive({"api_key": 1})
    assert d["api_key"] == 1
    assert d.get("api_key") == 1
    assert d.get("missing") is None
    with pytest.raises(KeyError):
        d["missing"]
    assert capsys.readouterr().err == ""


def test_warned_set_is_bounded(capsys):
    for i in range(forgiving._WARNED_LIMIT + 500):
        d = forgive({"key_%d" % i: i})
        assert d["key%d" % i] == i
    assert len(forgiving._WARNED) <= forgiving._WARNED_LIMIT
    capsys.readouterr()


def test_ambiguous_match_raises_key_error(capsys):
    d = forgive({"api_key": 1, "API_KEY": 2})
    with pytest.raises(KeyError) as info:
        d["apiKey"]
    assert info.value.args == ("apiKey",)
    assert d.get("apiKey") is None
    assert d.get("apiKey", "fallback") == "fallback"
    assert capsys.readouterr().err == ""


def test_no_match_behaves_like_dict():
    d = forgive({"api_key": 1, 5: "five"})
    with pytest.raises(KeyError):
        d["api_keys"]
    with pytest.raises(KeyError):
        d[6]
    assert d[5] == "five"
    assert d.get("token", 0) == 0
    with pytest.raises(TypeError):
        d[["unhashable"]]


def test_in_is_exact():
    d = forgive({"api_key": 1})
    assert d["apiKey"] == 1
    assert "apiKey" not in d
    assert "api_key" in d
    assert list(d.keys()) == ["api_key"]


def test_json_dumps_equals_original():
    original = {
        "api_key": "k",
        "items": [{"repo_name": "a", "tags": ["x", {"deep_key": None}]}, 3, True],
        "nested": {"camelCase": 1.5, "unicode": "\u00e9"},
    }
    d = forgive(original)
    assert json.dumps(d) == json.dumps(original)
    assert json.dumps(d, indent=2, sort_keys=True) == json.dumps(original, indent=2, sort_keys=True)


def test_equality_repr_and_dict_behaviour():
    original = {"api_key": "k", "items": [{"repo_name": "a"}], "t": (1, {"x_y": 2})}
    d = forgive(original)
    assert d == original
    assert original == d
    assert isinstance(d, dict)
    assert repr(d) == repr(original)
    assert str(d) == str(original)
    assert dict(d) == original
    assert d != {"api_key": "other"}


def test_pickle_and_copy_round_trip():
    original = {"api_key": "k", "items": [{"repo_name": "a"}]}
    d = forgive(original)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(d, protocol))
        assert back == original
        assert type(back) is ForgivingDict
        assert back["items"][0]["repoName"] == "a"
    deep = copy.deepcopy(d)
    assert deep == original and deep["items"][0]["repoName"] == "a"
    assert copy.copy(d)["apiKey"] == "k"


def test_deep_nesting_does_not_crash():
    depth = 5000
    data = {"leaf_value": 1}
    for _ in range(depth):
        data = {"child_node": data, "list_node": [data]}
    d = forgive(data)
    node = d
    for _ in range(depth):
        assert type(node) is ForgivingDict
        node = node["childNode"]
    assert node["leafValue"] == 1

    ForgivingDict(data)  # the constructor converts the same way

    nested_lists = {"leaf_value": 2}
    for _ in range(depth):
        nested_lists = [[nested_lists]]
    node = forgive(nested_lists)
    for _ in range(2 * depth):
        node = node[0]
    assert node["leafValue"] == 2


def test_module_imports_are_cheap_and_syntax_is_python39():
    path = forgiving.__file__
    with open(path, encoding="utf-8") as f:
        source = f.read()
    tree = ast.parse(source, feature_version=(3, 9))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            imported.add(node.module)
    assert imported <= {"re", "sys", "json"}


# ---------------------------------------------------------------- correct_arguments


SCHEMA = {
    "type": "object",
    "properties": {
        "repo_name": {"type": "string"},
        "owner": {"type": "string"},
        "options": {
            "type": "object",
            "properties": {"max_results": {"type": "integer"}, "sortOrder": {"type": "string"}},
        },
        "labels": {
            "type": "array",
            "items": {"type": "object", "properties": {"label_name": {"type": "string"}}},
        },
    },
}


def test_correct_arguments_renames_and_reports():
    args = {"repoName": "nsbox", "owner": "me"}
    fixed, fixes = correct_arguments(args, SCHEMA)
    assert fixed == {"repo_name": "nsbox", "owner": "me"}
    assert list(fixed) == ["repo_name", "owner"]
    assert fixes == [("repoName", "repo_name")]


def test_correct_arguments_leaves_unknown_keys():
    args = {"repo_name": "nsbox", "somethingElse": 1, "colour": "red"}
    fixed, fixes = correct_arguments(args, SCHEMA)
    assert fixed == args
    assert fixes == []


def test_correct_arguments_nested_objects_and_arrays():
    args = {
        "RepoName": "x",
        "Options": {"maxResults": 5, "sort_order": "asc", "other": 1},
        "labels": [{"labelName": "bug"}, {"label_name": "ok"}],
    }
    fixed, fixes = correct_arguments(args, SCHEMA)
    assert fixed == {
        "repo_name": "x",
        "options": {"max_results": 5, "sortOrder": "asc", "other": 1},
        "labels": [{"label_name": "bug"}, {"label_name": "ok"}],
    }
    assert fixes == [
        ("RepoName", "repo_name"),
        ("Options", "options"),
        ("options.maxResults", "options.max_results"),
        ("options.sort_order", "options.sortOrder"),
        ("labels[0].labelName", "labels[0].label_name"),
    ]


def test_correct_arguments_does_not_mutate_input():
    args = {"repoName": "x", "options": {"maxResults": 5}, "labels": [{"labelName": "bug"}]}
    snapshot = copy.deepcopy(args)
    options, labels = args["options"], args["labels"]
    fixed, fixes = correct_arguments(args, SCHEMA)
    assert args == snapshot
    assert args["options"] is options and args["labels"] is labels
    assert fixed is not args and fixed["options"] is not options
    assert fixes


def test_correct_arguments_ambiguous_or_conflicting_is_left_alone():
    # the schema spelling is given too: do not overwrite it
    args = {"repoName": "a", "repo_name": "b"}
    assert correct_arguments(args, SCHEMA) == (args, [])
    # two given keys claim the same property
    args = {"repoName": "a", "RepoName": "b"}
    assert correct_arguments(args, SCHEMA) == (args, [])
    # two schema properties with the same normalised form
    schema = {"properties": {"repo_name": {}, "repoName": {}}}
    args = {"RepoName": "a"}
    assert correct_arguments(args, schema) == (args, [])


def test_correct_arguments_without_schema():
    args = {"repoName": "x"}
    assert correct_arguments(args, None) == (args, [])
    assert correct_arguments(args, {}) == (args, [])
    assert correct_arguments(args, {"type": "object"}) == (args, [])
    assert correct_arguments(args, None)[0] is args
