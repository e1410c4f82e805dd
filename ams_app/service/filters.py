"""Subscription filters: the Google Pub/Sub attribute-filter language. Pure, no I/O.

A subscription with a filter is handed only the messages whose attributes the filter accepts.
The filter arrives as text in a request body, so everything here is about reading untrusted
text safely: ``parse`` turns it into a small immutable tree, or raises ``FilterError`` (and
nothing else) with a message for a 400 answer that says what was expected, what was found and
where (a 0-based character index). ``Filter.matches`` then evaluates the tree on a message's
attributes; it cannot fail.

The reader is a recursive-descent parser over a character scanner, both written out by hand:
no regular expressions and no parser library, so that every decision (what a name may hold,
which escapes exist, where whitespace may go) is spelled out once, below, and each failure can
name its own position. The recursion is bounded: the text is at most ``MAX_BYTES`` bytes of
UTF-8, and at most 64 parentheses and NOTs may be open at once, so no input can exhaust the
stack; evaluation recurses over the same tree, so it is bounded too.

Grammar (EBNF; the whole text must be one ``filter``)::

    filter    = ws, condition, ws ;
    condition = term, { ws, "AND", ws, term }
              | term, { ws, "OR", ws, term } ;
    term      = "NOT", ws1, term
              | "-", term
              | "(", ws, condition, ws, ")"
              | "attributes", ws, ":", ws, key
              | "attributes.", key, ws, ( "=" | "!=" ), ws, string
              | "hasPrefix", ws, "(", ws, "attributes.", key, ws, ",", ws, string, ws, ")" ;
    key       = name | string ;
    name      = namechar, { namechar } ;
    namechar  = "A".."Z" | "a".."z" | "0".."9" | "_" | "-" ;
    string    = '"', { char | escape }, '"' ;
    char      = ? any character but '"' and "\\" ? ;
    escape    = "\\", ( '"' | "\\" | "n" | "t" | "r"
                     | "x", hex, hex
                     | "u", hex, hex, hex, hex
                     | octal, octal, octal ) ;
    hex       = "0".."9" | "a".."f" | "A".."F" ;
    octal     = "0".."7" ;
    ws        = { " " | "\\t" | "\\n" } ;
    ws1       = ( " " | "\\t" | "\\n" ), ws ;

The rules the grammar leaves out:

- Meaning: ``attributes:KEY`` holds when the attribute exists; ``attributes.KEY = "v"`` when it
  exists with exactly that value; ``attributes.KEY != "v"`` when it does not (so also when it
  is absent); ``hasPrefix(attributes.KEY, "p")`` when it exists and its value starts with
  ``p``. ``NOT`` and ``-`` negate the term that follows, and bind tighter than AND and OR.
- A condition is all ANDs or all ORs: ``a AND b OR c`` is refused, as its reading would be a
  guess; parentheses say which one is meant.
- Keywords (``AND``, ``OR``, ``NOT``) and the words ``attributes`` and ``hasPrefix`` are
  case-sensitive. A name (a key, a keyword) runs as far as name characters go, so a keyword
  after a bare key needs whitespace before it (``attributes:kAND`` is the key ``kAND``).
- ``NOT`` must be followed by whitespace; ``-`` must be followed directly by its term
  (``-attributes:k``). ``attributes.KEY`` is written without whitespace around the dot; around
  ``:``, ``=``, ``!=``, the parentheses and the comma, whitespace is free.
- A key that is not a name, such as ``iana.org/language_tag``, is written as a string; a key
  may not be empty. Values and prefixes are always strings.
- Escapes: ``\\xHH`` and the octal ``\\NNN`` (at most ``\\377``) stand for the code points
  U+0000 to U+00FF, ``\\uHHHH`` for one code point; a UTF-16 surrogate pair of two ``\\u``
  escapes stands for the one code point it encodes, and a lone surrogate is refused. Any other
  escape is refused, and a string must be closed.
- Limits: the text is at most ``MAX_BYTES`` bytes in UTF-8 and not empty (nor only
  whitespace): no filter at all is the caller's business, not a filter. At most 64
  parentheses and NOTs (``-`` included) may be open at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["MAX_BYTES", "Filter", "FilterError", "parse"]

#: Longest filter, in bytes of UTF-8.
MAX_BYTES = 256
#: Most parentheses and NOTs open at once: bounds the parser's and the evaluation's recursion.
_MAX_DEPTH = 64

_WHITESPACE = frozenset(" \t\n")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_SHOWN_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_KNOWN_ESCAPES = '\\" \\\\ \\n \\t \\r \\xHH \\uHHHH or octal \\NNN up to \\377'
_LONGEST_SHOWN = 24
_PREFIX = "Invalid filter: "


class FilterError(ValueError):
    """A malformed filter: ``message`` (starting "Invalid filter: ") and the 0-based character
    index where reading failed; ``str()`` gives both, for a 400 answer."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.message = message
        self.position = position


# The tree. Each node evaluates itself on a message's attributes.


@dataclass(frozen=True, slots=True)
class Has:
    key: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key in attributes


@dataclass(frozen=True, slots=True)
class Eq:
    key: str
    value: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key in attributes and attributes[self.key] == self.value


@dataclass(frozen=True, slots=True)
class Ne:
    key: str
    value: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key not in attributes or attributes[self.key] != self.value


@dataclass(frozen=True, slots=True)
class Prefix:
    key: str
    prefix: str

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.key in attributes and attributes[self.key].startswith(self.prefix)


@dataclass(frozen=True, slots=True)
class Not:
    term: Node

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return not self.term.matches(attributes)


@dataclass(frozen=True, slots=True)
class And:
    terms: tuple[Node, ...]

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return all(term.matches(attributes) for term in self.terms)


@dataclass(frozen=True, slots=True)
class Or:
    terms: tuple[Node, ...]

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return any(term.matches(attributes) for term in self.terms)


Node: TypeAlias = Has | Eq | Ne | Prefix | Not | And | Or


@dataclass(frozen=True, slots=True)
class Filter:
    """A parsed filter: the text it was read from and its tree."""

    text: str
    tree: Node

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return self.tree.matches(attributes)


def parse(text: str) -> Filter:
    """The filter that ``text`` spells; FilterError if it spells none."""
    # surrogatepass: a lone surrogate in the text counts its 3 bytes instead of failing here
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise FilterError(f"{_PREFIX}longer than {MAX_BYTES} bytes", 0)
    return Filter(text, _Parser(text).filter())


# Reading.


def _show(text: str) -> str:
    """``text`` in double quotes for a message, control and other unprintable characters
    escaped, cut short if long."""
    cut = len(text) > _LONGEST_SHOWN
    shown: list[str] = []
    for ch in text[:_LONGEST_SHOWN]:
        if ch.isprintable():
            shown.append(ch)
        elif ch in _SHOWN_ESCAPES:
            shown.append(_SHOWN_ESCAPES[ch])
        elif ord(ch) <= 0xFF:
            shown.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            shown.append(f"\\u{ord(ch):04x}")
        else:
            shown.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(shown) + ('..."' if cut else '"')


def _one_of(choices: list[str]) -> str:
    return choices[0] if len(choices) == 1 else ", ".join(choices[:-1]) + " or " + choices[-1]


class _Scanner:
    """The text and a position in it: looks at characters, skips whitespace, reads names and
    strings, and describes what stands at the position for an error message."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, ahead: int = 0) -> str:
        """The character ``ahead`` places on; "" past the end."""
        return self.text[self.pos + ahead : self.pos + ahead + 1]

    def startswith(self, token: str) -> bool:
        return self.text.startswith(token, self.pos)

    def skip_whitespace(self) -> bool:
        """Past any whitespace; whether there was any."""
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
            self.pos += 1
        return self.pos > start

    def name(self) -> str:
        """The name (maximal run of name characters) at the position, not consumed; "" if none."""
        end = self.pos
        while end < len(self.text) and self.text[end] in _NAME_CHARS:
            end += 1
        return self.text[self.pos : end]

    def next_after_whitespace(self, start: int) -> str:
        """The first character from ``start`` on that is not whitespace; "" if none."""
        while start < len(self.text) and self.text[start] in _WHITESPACE:
            start += 1
        return self.text[start : start + 1]

    def found(self) -> str:
        """What stands at the position, for "expected ..., found ..."."""
        if self.at_end():
            return "the end of the filter"
        ch = self.text[self.pos]
        if ch in _WHITESPACE:
            return "whitespace"
        if ch == '"':
            return "a quoted string"
        if self.startswith("!="):
            return '"!="'
        return _show(self.name() or ch)

    def fail(self, message: str, position: int | None = None) -> FilterError:
        return FilterError(_PREFIX + message, self.pos if position is None else position)

    def string(self) -> str:
        """The string whose opening quote is at the position, escapes resolved; past its end."""
        opened = self.pos
        self.pos += 1
        chars: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                self.pos += 1
                return "".join(chars)
            if ch == "\\":
                chars.append(self._escape())
            else:
                chars.append(ch)
                self.pos += 1
        raise self.fail(
            f"expected the closing double quote of the string opened at position {opened}, found the end of the filter"
        )

    def _escape(self) -> str:
        """The character an escape at the position stands for; past the escape. Errors name
        the backslash's position."""
        start = self.pos
        kind = self.peek(1)
        if kind in _SIMPLE_ESCAPES:
            self.pos += 2
            return _SIMPLE_ESCAPES[kind]
        if kind == "x":
            return chr(self._digits(start, 2, 2, _HEX, 16))
        if kind == "u":
            code = self._digits(start, 2, 4, _HEX, 16)
            if 0xDC00 <= code <= 0xDFFF:
                raise self._bad_escape(start, 6, "a low surrogate with no high surrogate before it")
            if 0xD800 <= code <= 0xDBFF:
                second = self.pos
                if not self.startswith("\\u"):
                    raise self._bad_escape(start, 6, "a high surrogate with no \\uDC00-\\uDFFF escape right after it")
                low = self._digits(second, 2, 4, _HEX, 16)
                if not 0xDC00 <= low <= 0xDFFF:
                    raise self._bad_escape(start, 12, "a high surrogate with no \\uDC00-\\uDFFF escape right after it")
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            return chr(code)
        if kind in _OCTAL:
            code = self._digits(start, 1, 3, _OCTAL, 8)
            if code > 0o377:
                raise self._bad_escape(start, 4, "above \\377")
            return chr(code)
        raise self._bad_escape(start, 2)

    def _digits(self, start: int, skip: int, count: int, allowed: frozenset[str], base: int) -> int:
        """The ``count`` digits ``skip`` characters after the backslash at ``start``; past them."""
        digits = self.text[start + skip : start + skip + count]
        if len(digits) < count or any(d not in allowed for d in digits):
            raise self._bad_escape(start, skip + count)
        self.pos = start + skip + count
        return int(digits, base)

    def _bad_escape(self, start: int, length: int, why: str = "") -> FilterError:
        escape = _show(self.text[start : start + length])
        if why:
            return self.fail(f"expected an escape ({_KNOWN_ESCAPES}), found {escape}, {why}", start)
        return self.fail(f"expected an escape ({_KNOWN_ESCAPES}), found {escape}", start)


class _Parser:
    """One method per rule of the grammar, reading from a _Scanner."""

    def __init__(self, text: str) -> None:
        self.scan = _Scanner(text)
        self.depth = 0

    def filter(self) -> Node:
        self.scan.skip_whitespace()
        if self.scan.at_end():
            raise FilterError(f"{_PREFIX}empty", 0)
        return self.condition(opened=None)

    def condition(self, opened: int | None) -> Node:
        """Terms joined by AND, or by OR. Stops at the ")" closing the "(" at ``opened``, or at
        the end of the filter if ``opened`` is None; anything else after a term is an error."""
        scan = self.scan
        terms = [self.term()]
        joiner: str | None = None
        while True:
            scan.skip_whitespace()
            if opened is None and scan.at_end():
                break
            if opened is not None and scan.peek() == ")":
                break
            word = scan.name()
            if word in ("AND", "OR"):
                if joiner is not None and word != joiner:
                    raise scan.fail(f'AND and OR cannot be mixed without parentheses: found "{word}" after "{joiner}"')
                joiner = word
                scan.pos += len(word)
                scan.skip_whitespace()
                terms.append(self.term())
                continue
            joiners = ["AND", "OR"] if joiner is None else [joiner]
            if word.upper() in ("AND", "OR"):
                raise scan.fail(f'expected "{word.upper()}" (keywords are upper-case), found {_show(word)}')
            expected = [f'"{j}"' for j in joiners]
            expected.append("the end of the filter" if opened is None else f'")" to close the "(" at position {opened}')
            raise scan.fail(f"expected {_one_of(expected)}, found {scan.found()}")
        if len(terms) == 1:
            return terms[0]
        return And(tuple(terms)) if joiner == "AND" else Or(tuple(terms))

    def term(self) -> Node:
        scan = self.scan
        start = scan.pos
        if scan.peek() == "-":
            self._open(start)
            scan.pos += 1
            if scan.peek() in _WHITESPACE:
                raise scan.fail(f'expected a term right after "-", found {scan.found()}')
            return self._close(Not(self.term()))
        if scan.peek() == "(":
            self._open(start)
            scan.pos += 1
            scan.skip_whitespace()
            inner = self.condition(opened=start)
            scan.pos += 1  # the ")" condition stopped at
            return self._close(inner)
        word = scan.name()
        if word == "NOT":
            self._open(start)
            scan.pos += len(word)
            if scan.peek() not in _WHITESPACE:
                raise scan.fail(f'expected whitespace after "NOT", found {scan.found()}')
            scan.skip_whitespace()
            return self._close(Not(self.term()))
        if word == "attributes":
            return self.attribute()
        if word == "hasPrefix":
            return self.has_prefix()
        if word and scan.next_after_whitespace(start + len(word)) == "(":
            if word.lower() == "hasprefix":
                raise scan.fail(f'expected "hasPrefix" (function names are case-sensitive), found {_show(word)}')
            raise scan.fail(f'expected "hasPrefix" (the only function), found the unknown function {_show(word)}')
        for proper in ("NOT", "attributes"):
            if word.lower() == proper.lower():
                raise scan.fail(f'expected "{proper}" (keywords are case-sensitive), found {_show(word)}')
        raise scan.fail(f'expected "attributes", "hasPrefix", "NOT", "-" or "(", found {scan.found()}')

    def attribute(self) -> Node:
        """``attributes:KEY``, ``attributes.KEY = "v"`` or ``attributes.KEY != "v"``; the
        scanner is at "attributes"."""
        scan = self.scan
        scan.pos += len("attributes")
        if scan.peek() == ".":
            scan.pos += 1
            key = self.key('"attributes."')
            scan.skip_whitespace()
            if scan.startswith("!="):
                scan.pos += 2
                op = "!="
            elif scan.peek() == "=":
                scan.pos += 1
                op = "="
            else:
                raise scan.fail(f'expected "=" or "!=" after attributes.KEY, found {scan.found()}')
            scan.skip_whitespace()
            value = self.string(f'a value in double quotes after "{op}"')
            return Eq(key, value) if op == "=" else Ne(key, value)
        after_word = scan.pos
        spaced = scan.skip_whitespace()
        if scan.peek() == ":":
            scan.pos += 1
            scan.skip_whitespace()
            return Has(self.key('":"'))
        if spaced and scan.peek() == ".":
            raise scan.fail(
                'expected "." or ":" after "attributes" (no whitespace before the "."), found whitespace', after_word
            )
        raise scan.fail(f'expected "." or ":" after "attributes", found {scan.found()}')

    def has_prefix(self) -> Node:
        """``hasPrefix(attributes.KEY, "p")``; the scanner is at "hasPrefix"."""
        scan = self.scan
        scan.pos += len("hasPrefix")
        scan.skip_whitespace()
        if scan.peek() != "(":
            raise scan.fail(f'expected "(" after hasPrefix, found {scan.found()}')
        scan.pos += 1
        scan.skip_whitespace()
        if scan.name() != "attributes":
            raise scan.fail(f"expected attributes.KEY as the first argument of hasPrefix, found {scan.found()}")
        scan.pos += len("attributes")
        if scan.peek() != ".":
            raise scan.fail(f'expected "." right after "attributes" in hasPrefix, found {scan.found()}')
        scan.pos += 1
        key = self.key('"attributes."')
        scan.skip_whitespace()
        if scan.peek() != ",":
            raise scan.fail(f'expected "," and a prefix after the key in hasPrefix, found {scan.found()}')
        scan.pos += 1
        scan.skip_whitespace()
        prefix = self.string("a prefix in double quotes as the second argument of hasPrefix")
        scan.skip_whitespace()
        if scan.peek() != ")":
            raise scan.fail(f'expected ")" to close hasPrefix, found {scan.found()}')
        scan.pos += 1
        return Prefix(key, prefix)

    def key(self, after: str) -> str:
        """A name or a non-empty string, right at the position."""
        scan = self.scan
        start = scan.pos
        if scan.peek() == '"':
            key = scan.string()
            if not key:
                raise scan.fail(f'expected an attribute key after {after}, found the empty string ""', start)
            return key
        name = scan.name()
        if not name:
            raise scan.fail(f"expected an attribute key after {after}, found {scan.found()}")
        scan.pos += len(name)
        return name

    def string(self, expected: str) -> str:
        if self.scan.peek() != '"':
            raise self.scan.fail(f"expected {expected}, found {self.scan.found()}")
        return self.scan.string()

    def _open(self, position: int) -> None:
        """One more parenthesis or NOT open, at ``position``."""
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.scan.fail(
                f"expected at most {_MAX_DEPTH} parentheses and NOTs open at once, found more", position
            )

    def _close(self, node: Node) -> Node:
        self.depth -= 1
        return node
