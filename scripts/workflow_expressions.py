"""GitHub Actions' ``${{ }}`` expressions, evaluated over plain dicts: ``interpolate`` a
step's text, ``condition`` an ``if:``. Operators, literals, property and index access,
``*`` filters and the functions the workflows call (passed in); for scripts/rehearse.py."""

from __future__ import annotations

import json
import re


class RehearsalError(RuntimeError):
    """The rehearsal cannot go on (bad workflow, git failure, unknown action)."""


_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<op>==|!=|&&|\|\||[!().,*\[\]])|(?P<name>[A-Za-z_][\w-]*))"
)


class _Each(list):
    """The result of ``.*``: property access maps over its items."""


def _truthy(v) -> bool:
    return v not in (None, False, 0, "")


def _equal(a, b) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def to_text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


class Expression:
    """GitHub's expression language, the part workflows like ours use: literals, contexts
    with ``.name`` and ``.*``, ``! == != && ||``, parentheses, and the functions given."""

    def __init__(self, text: str, contexts: dict, functions: dict):
        self.text, self.contexts, self.functions = text, contexts, functions
        self.tokens, pos = [], 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise RehearsalError(f"cannot read expression {text!r} at {text[pos:]!r}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def value(self):
        v = self._or()
        if self.i != len(self.tokens):
            raise RehearsalError(f"cannot read expression {self.text!r}: {self.tokens[self.i]}")
        return v

    def _peek(self, *ops) -> bool:
        return self.i < len(self.tokens) and self.tokens[self.i] in [("op", o) for o in ops]

    def _take(self, op: str) -> None:
        if not self._peek(op):
            raise RehearsalError(f"expected {op!r} in expression {self.text!r}")
        self.i += 1

    def _or(self):
        v = self._and()
        while self._peek("||"):
            self.i += 1
            rhs = self._and()
            v = v if _truthy(v) else rhs
        return v

    def _and(self):
        v = self._eq()
        while self._peek("&&"):
            self.i += 1
            rhs = self._eq()
            v = rhs if _truthy(v) else v
        return v

    def _eq(self):
        v = self._not()
        if self._peek("==", "!="):
            op = self.tokens[self.i][1]
            self.i += 1
            same = _equal(v, self._not())
            return same if op == "==" else not same
        return v

    def _not(self):
        if self._peek("!"):
            self.i += 1
            return not _truthy(self._not())
        return self._primary()

    def _primary(self):
        kind, tok = self.tokens[self.i]
        self.i += 1
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind == "num":
            return float(tok) if "." in tok else int(tok)
        if (kind, tok) == ("op", "("):
            v = self._or()
            self._take(")")
            return v
        if kind != "name":
            raise RehearsalError(f"unexpected {tok!r} in expression {self.text!r}")
        if tok in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[tok]
        if self._peek("("):
            self.i += 1
            args = []
            while not self._peek(")"):
                args.append(self._or())
                if self._peek(","):
                    self.i += 1
            self._take(")")
            if tok not in self.functions:
                raise RehearsalError(f"the rehearsal has no function {tok}() ({self.text!r})")
            return self.functions[tok](*args)
        if tok not in self.contexts:
            raise RehearsalError(f"the rehearsal has no context {tok!r} ({self.text!r})")
        v = self.contexts[tok]
        while self._peek(".", "["):
            if self._peek("["):  # an index: pull_requests[0]
                self.i += 1
                index = self._or()
                self._take("]")
                if isinstance(v, list) and isinstance(index, int):
                    v = v[index] if -len(v) <= index < len(v) else None
                else:
                    v = v.get(to_text(index)) if isinstance(v, dict) else None
                continue
            self.i += 1
            kind, name = self.tokens[self.i]
            self.i += 1
            if name == "*":
                v = _Each(v.values() if isinstance(v, dict) else v or [])
            elif isinstance(v, _Each):
                v = _Each(x.get(name) if isinstance(x, dict) else None for x in v)
            else:
                v = v.get(name) if isinstance(v, dict) else None
        return v


def contains(search, item) -> bool:
    if isinstance(search, list):
        return any(_equal(x, item) for x in search)
    return to_text(item).lower() in to_text(search).lower()


def interpolate(text: str, contexts: dict, functions: dict) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}",
                  lambda m: to_text(Expression(m.group(1), contexts, functions).value()),
                  str(text))  # fmt: skip


def condition(text, contexts: dict, functions: dict) -> bool:
    if isinstance(text, bool):
        return text
    inner = re.fullmatch(r"\s*\$\{\{(.*)\}\}\s*", str(text))
    return _truthy(Expression(inner.group(1) if inner else str(text), contexts, functions).value())
