"""Forgive case-style slips in field names of tool results and tool arguments.

Code in a sandbox reads tool results as decoded JSON and often guesses a
field's spelling wrong only in its case style: ``result["apiKey"]`` when the
data says ``api_key``, or the reverse.  Hosted agent workbenches forgive that,
and so does nsbox:

* ``forgive(value)`` turns every ``dict`` inside ``value`` (through dicts,
  lists and tuples) into a ``ForgivingDict``.  A ``ForgivingDict`` is a real
  ``dict`` (``json.dumps``, ``==``, ``repr``, ``pickle`` are unchanged) whose
  ``d[key]`` and ``d.get(key)`` fall back, when ``key`` is missing, to the one
  existing key with the same normalised form, and say so on stderr once:
  ``nsbox: no key 'apiKey' in the result; using 'api_key'``.
  ``key in d`` stays exact.
* ``correct_arguments(arguments, schema)`` renames argument keys to the
  spelling of the tool's JSON schema.

Keys are split into words at underscores, hyphens and whitespace and at case
boundaries (``fooBar`` -> foo, bar; ``HTTPStatus`` -> http, status; a plural
``s`` stays with its acronym: ``userIDs`` -> user, ids); digits stay with the
word before them (``createdAt2`` -> created, at2).  The normalised form is the
lowercased words joined with nothing, so ``api_key``, ``apiKey``, ``ApiKey``,
``api-key``, ``API_KEY`` and ``apikey`` are one name.  Leading and trailing
separators are kept (``_id`` and ``id`` are different names).

Standard library only, and only ``re`` and ``sys``, so that importing it is
cheap.
"""
from __future__ import annotations

import re
import sys

__all__ = [
    "ForgivingDict",
    "correct_arguments",
    "forgive",
    "key_variants",
    "normalise",
]

_SEPARATORS = re.compile(r"[_\-\s]+")
_AFFIXES = re.compile(r"([_\-\s]*)(.*?)([_\-\s]*)\Z", re.S)

_NOTHING = object()      # "no such key" marker (None is a valid value)
_AMBIGUOUS = object()    # several schema properties share a normalised form

_WARNED = set()          # (missing, real) pairs already reported
_WARNED_LIMIT = 1000
_NORMALISED = {}         # cache for normalise()
_NORMALISED_LIMIT = 4096
_SCHEMA_DEPTH_LIMIT = 100


# ---------------------------------------------------------------- key names


def _split(name):
    """(prefix, words, suffix) of a key name; words keep their case."""
    prefix, core, suffix = _AFFIXES.match(name).groups()
    words = []
    for part in _SEPARATORS.split(core):
        n = len(part)
        start = 0
        for i in range(1, n):
            c = part[i]
            if not c.isupper():
                continue
            p = part[i - 1]
            if p.islower() or p.isdigit():
                # fooBar, at2Name
                words.append(part[start:i])
                start = i
            elif p.isupper() and i + 1 < n and part[i + 1].islower():
                # HTTPStatus -> HTTP | Status, but userIDs stays IDs
                if part[i + 1] == "s" and (i + 2 == n or not part[i + 2].islower()):
                    continue
                words.append(part[start:i])
                start = i
        if n:
            words.append(part[start:])
    return prefix, words, suffix


def normalise(name: str) -> str:
    """The case-style-free form of a key: its words lowercased and joined."""
    try:
        return _NORMALISED[name]
    except KeyError:
        pass
    prefix, words, suffix = _split(name)
    result = prefix + "".join(words).lower() + suffix
    if len(_NORMALISED) >= _NORMALISED_LIMIT:
        _NORMALISED.clear()
    _NORMALISED[name] = result
    return result


def key_variants(name: str) -> list[str]:
    """The other spellings of ``name`` in snake_case, camelCase, PascalCase,
    kebab-case and SCREAMING_SNAKE, in that order, without ``name`` itself and
    without duplicates."""
    prefix, words, suffix = _split(name)
    if not words:
        return []
    lower = [w.lower() for w in words]
    capital = [w[:1].upper() + w[1:] for w in lower]
    spellings = (
        "_".join(lower),
        lower[0] + "".join(capital[1:]),
        "".join(capital),
        "-".join(lower),
        "_".join(lower).upper(),
    )
    result = []
    for s in spellings:
        s = prefix + s + suffix
        if s != name and s not in result:
            result.append(s)
    return result


def _warn(missing, real):
    pair = (missing, real)
    if pair in _WARNED:
        return
    if len(_WARNED) >= _WARNED_LIMIT:
        _WARNED.clear()
    _WARNED.add(pair)
    try:
        stream = sys.stderr
        stream.write("nsbox: no key %r in the result; using %r\n" % (missing, real))
        stream.flush()
    except Exception:
        pass


# ---------------------------------------------------------------- results


_CONTAINERS = (dict, list, tuple)


def forgive(value):
    """``value`` with every plain ``dict`` in it (inside dicts, lists and
    tuples, at any depth) replaced by a ``ForgivingDict``.

    Containers are copied, never changed in place; other values (including
    dict subclasses other than exactly ``dict``) are kept as they are.  Shared
    and cyclic references are preserved.  Works without recursion, so any
    nesting depth is fine.
    """
    kind = type(value)
    if kind is not dict and kind is not list and kind is not tuple:
        return value

    # 1. every container reachable from value, each once
    seen = {}
    order = []
    stack = [value]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        order.append(obj)
        for child in (obj.values() if type(obj) is dict else obj):
            t = type(child)
            if (t is dict or t is list or t is tuple) and id(child) not in seen:
                stack.append(child)

    # 2. empty new dicts and lists (mutable, so they can be filled later)
    new = {}
    for obj in order:
        t = type(obj)
        if t is dict:
            new[id(obj)] = dict.__new__(ForgivingDict)
        elif t is list:
            new[id(obj)] = []

    def convert(child):
        t = type(child)
        if t is dict or t is list or t is tuple:
            return new[id(child)]
        return child

    # 3. tuples, inner ones first (a tuple needs its elements to exist)
    for obj in order:
        if type(obj) is not tuple or id(obj) in new:
            continue
        pending = [(obj, False)]
        while pending:
            tup, expanded = pending.pop()
            if id(tup) in new:
                continue
            if expanded:
                items = tuple([convert(c) for c in tup])
                same = all(a is b for a, b in zip(items, tup))
                new[id(tup)] = tup if same else items
            else:
                pending.append((tup, True))
                for c in tup:
                    if type(c) is tuple and id(c) not in new:
                        pending.append((c, False))

    # 4. fill the dicts and lists
    for obj in order:
        t = type(obj)
        if t is dict:
            dict.update(new[id(obj)], [(k, convert(v)) for k, v in obj.items()])
        elif t is list:
            new[id(obj)].extend([convert(v) for v in obj])

    return new[id(value)]


class ForgivingDict(dict):
    """A ``dict`` that forgives case-style slips in key names when reading.

    ``d[key]`` and ``d.get(key)`` on a missing str ``key`` use the one
    existing key with the same ``normalise()`` form, if there is exactly one,
    and write ``nsbox: no key 'apiKey' in the result; using 'api_key'`` to
    stderr (once per pair and process).  With no match or several matches they
    behave like a dict (``KeyError`` / the default).  Everything else, ``in``
    included, is exactly ``dict``.  Values stored are passed through
    ``forgive()`` so that nested dicts forgive too.
    """

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        dict.__init__(self, *args, **kwargs)
        keys = [k for k, v in dict.items(self) if type(v) in _CONTAINERS]
        if keys:
            values = forgive([dict.__getitem__(self, k) for k in keys])
            dict.update(self, zip(keys, values))

    # -- reading

    def _real_key(self, key):
        if not isinstance(key, str):
            return _NOTHING
        target = normalise(key)
        found = _NOTHING
        for k in dict.keys(self):
            if isinstance(k, str) and k != key and normalise(k) == target:
                if found is not _NOTHING:
                    return _NOTHING  # ambiguous
                found = k
        if found is not _NOTHING:
            _warn(key, found)
        return found

    def __missing__(self, key):
        real = self._real_key(key)
        if real is _NOTHING:
            raise KeyError(key)
        return dict.get(self, real)

    def get(self, key, default=None):
        value = dict.get(self, key, _NOTHING)
        if value is not _NOTHING:
            return value
        real = self._real_key(key)
        if real is _NOTHING:
            return default
        return dict.get(self, real)

    # -- writing: keep nested dicts forgiving

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, forgive(value))

    def setdefault(self, key, default=None):
        return dict.setdefault(self, key, forgive(default))

    def update(self, *args, **kwargs):
        dict.update(self, ForgivingDict(*args, **kwargs))

    def __ior__(self, other):
        self.update(other)
        return self

    def __or__(self, other):
        if not isinstance(other, dict):
            return NotImplemented
        result = self.copy()
        result.update(other)
        return result

    def copy(self):
        result = dict.__new__(ForgivingDict)
        dict.update(result, self)
        return result


# ---------------------------------------------------------------- arguments


def _properties(schema):
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    if isinstance(properties, dict) and properties:
        return properties
    return None


def _correct(arguments, schema, path, fixes, depth):
    properties = _properties(schema)
    if properties is None or not isinstance(arguments, dict) or depth > _SCHEMA_DEPTH_LIMIT:
        return arguments

    by_form = {}
    for prop in properties:
        if isinstance(prop, str):
            form = normalise(prop)
            by_form[form] = _AMBIGUOUS if form in by_form else prop

    # given key -> schema spelling, only when unambiguous both ways and the
    # schema spelling is not already given
    claims = {}
    for key in arguments:
        if isinstance(key, str) and key not in properties:
            prop = by_form.get(normalise(key))
            if prop is not None and prop is not _AMBIGUOUS and prop not in arguments:
                claims.setdefault(prop, []).append(key)
    renames = {keys[0]: prop for prop, keys in claims.items() if len(keys) == 1}

    changed = False
    result = {}
    for key, value in arguments.items():
        name = renames.get(key, key) if isinstance(key, str) else key
        if name is not key:
            fixes.append((path + key, path + name))
            changed = True
        sub = properties.get(name) if isinstance(name, str) else None
        new_value = value
        if isinstance(sub, dict):
            if isinstance(value, dict):
                new_value = _correct(value, sub, path + name + ".", fixes, depth + 1)
            elif isinstance(value, list) and _properties(sub.get("items")) is not None:
                items = sub["items"]
                new_items = [
                    _correct(v, items, "%s%s[%d]." % (path, name, i), fixes, depth + 1)
                    for i, v in enumerate(value)
                ]
                if any(a is not b for a, b in zip(new_items, value)):
                    new_value = new_items
        if new_value is not value:
            changed = True
        result[name] = new_value
    return result if changed else arguments


def correct_arguments(arguments: dict, schema: dict | None) -> tuple[dict, list[tuple[str, str]]]:
    """Rename argument keys that a tool's JSON schema spells differently.

    A key (at the top level, or inside a nested object whose schema has its
    own ``properties``, or inside objects in an array whose ``items`` have
    ``properties``) that is not a property of its schema but has the same
    ``normalise()`` form as exactly one property is renamed to that property,
    unless the property is also given.  Other keys are left as they are.

    Returns ``(arguments, fixes)``: ``fixes`` lists ``(given, corrected)``
    pairs, nested ones as dotted paths (``"options.maxResults"``,
    ``"options.max_results"``).  The input is never changed: the dicts on the
    path to a renamed key are copies, and with no fixes the very same
    ``arguments`` object is returned.
    """
    fixes = []
    return _correct(arguments, schema, "", fixes, 0), fixes
