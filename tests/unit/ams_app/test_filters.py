"""Subscription filters (ams_app.service.filters): evaluation, errors with their positions, and
fuzzing: nothing but FilterError ever escapes parse, and rendered random trees read back as
themselves."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ams_app.service.filters import MAX_BYTES, And, Eq, Filter, FilterError, Has, Ne, Node, Not, Or, Prefix, parse

FUZZ = settings(max_examples=300, deadline=None, database=None)


# Evaluation.


@pytest.mark.parametrize(
    ("text", "attributes", "expected"),
    [
        # existence
        ("attributes:a", {"a": ""}, True),
        ("attributes:a", {"b": "a"}, False),
        ("attributes:a", {}, False),
        # equality
        ('attributes.a = "x"', {"a": "x"}, True),
        ('attributes.a = "x"', {"a": "xy"}, False),
        ('attributes.a = "x"', {}, False),
        ('attributes.a = ""', {"a": ""}, True),
        # inequality: true when absent
        ('attributes.a != "x"', {}, True),
        ('attributes.a != "x"', {"a": "x"}, False),
        ('attributes.a != "x"', {"a": "y"}, True),
        # hasPrefix
        ('hasPrefix(attributes.a, "va")', {"a": "value"}, True),
        ('hasPrefix(attributes.a, "va")', {"a": "va"}, True),
        ('hasPrefix(attributes.a, "va")', {"a": "v"}, False),
        ('hasPrefix(attributes.a, "va")', {}, False),
        ('hasPrefix(attributes.a, "")', {"a": ""}, True),
        ('hasPrefix(attributes.a, "")', {}, False),
        # NOT and -
        ("NOT attributes:a", {}, True),
        ("NOT attributes:a", {"a": "1"}, False),
        ("-attributes:a", {}, True),
        ("-attributes:a", {"a": "1"}, False),
        ("NOT NOT attributes:a", {"a": "1"}, True),
        ("--attributes:a", {"a": "1"}, True),
        ("NOT -attributes:a", {}, False),
        ('-attributes.a = "x"', {}, True),
        ('NOT hasPrefix(attributes.a, "x")', {"a": "xy"}, False),
        # AND, OR
        ("attributes:a AND attributes:b", {"a": "", "b": ""}, True),
        ("attributes:a AND attributes:b", {"a": ""}, False),
        ("attributes:a AND attributes:b AND attributes:c", {"a": "", "b": "", "c": ""}, True),
        ("attributes:a OR attributes:b", {"b": ""}, True),
        ("attributes:a OR attributes:b", {}, False),
        ("attributes:a OR attributes:b OR attributes:c", {"c": ""}, True),
        # NOT binds tighter than AND and OR
        ("NOT attributes:a AND attributes:b", {"b": ""}, True),
        ("NOT attributes:a AND attributes:b", {"a": ""}, False),
        ("NOT (attributes:a AND attributes:b)", {"a": ""}, True),
        ("-attributes:a OR attributes:b", {}, True),
        ("-(attributes:a OR attributes:b)", {"b": ""}, False),
        # parentheses
        ("attributes:a AND (attributes:b OR attributes:c)", {"a": "", "c": ""}, True),
        ("attributes:a AND (attributes:b OR attributes:c)", {"b": ""}, False),
        ("(attributes:a AND attributes:b) OR attributes:c", {"c": ""}, True),
        ("((attributes:a))", {"a": ""}, True),
        ("(attributes:a)AND(attributes:b)", {"a": "", "b": ""}, True),
        # quoted keys, and keys spelled like keywords
        ('attributes:"iana.org/language_tag"', {"iana.org/language_tag": "en"}, True),
        ('attributes."iana.org/language_tag" = "en"', {"iana.org/language_tag": "en"}, True),
        ('hasPrefix(attributes."a b", "x")', {"a b": "xyz"}, True),
        ('attributes."\\u00e9" = "1"', {"é": "1"}, True),
        ("attributes:AND", {"AND": ""}, True),
        ("attributes:-x_1", {"-x_1": ""}, True),
        ("attributes:kAND", {"kAND": ""}, True),
        # escapes
        ('attributes.k = "\\""', {"k": '"'}, True),
        ('attributes.k = "\\\\"', {"k": "\\"}, True),
        ('attributes.k = "a\\nb\\tc\\rd"', {"k": "a\nb\tc\rd"}, True),
        ('attributes.k = "\\u00e9"', {"k": "é"}, True),
        ('attributes.k = "\\u00E9"', {"k": "é"}, True),
        ('attributes.k = "\\xe9"', {"k": "é"}, True),
        ('attributes.k = "\\x41\\x00"', {"k": "A\x00"}, True),
        ('attributes.k = "\\351"', {"k": "é"}, True),
        ('attributes.k = "\\101\\000"', {"k": "A\x00"}, True),
        ('attributes.k = "\\1011"', {"k": "A1"}, True),
        ('attributes.k = "\\ud83d\\ude00"', {"k": "😀"}, True),
        ('attributes.k = "é😀"', {"k": "é😀"}, True),
        ('attributes.k = "a\nb"', {"k": "a\nb"}, True),
        # whitespace
        ("attributes : a", {"a": ""}, True),
        ('attributes.k="v"', {"k": "v"}, True),
        ('attributes.k!="v"', {"k": "v"}, False),
        ('attributes.k\t=\n"v"', {"k": "v"}, True),
        ('attributes.k  !=  "v"', {}, True),
        ("( attributes:a )", {"a": ""}, True),
        ('hasPrefix ( attributes.k , "p" )', {"k": "pq"}, True),
        ('hasPrefix(attributes.k,"p")', {"k": "pq"}, True),
        ("\n attributes:a\tAND\nattributes:b \t", {"a": "", "b": ""}, True),
        ("NOT\tattributes:a", {}, True),
        ("NOT\n\n(attributes:a)", {}, True),
    ],
)
def test_evaluation(text: str, attributes: dict[str, str], expected: bool) -> None:
    assert parse(text).matches(attributes) is expected


def test_the_tree_and_the_text_are_kept() -> None:
    f = parse(' attributes:a AND NOT (attributes.b = "x" OR hasPrefix(attributes."c d", "p")) ')
    assert f.text == ' attributes:a AND NOT (attributes.b = "x" OR hasPrefix(attributes."c d", "p")) '
    assert f.tree == And((Has("a"), Not(Or((Eq("b", "x"), Prefix("c d", "p"))))))
    assert parse('attributes.b != "x"').tree == Ne("b", "x")


def test_a_filter_is_immutable() -> None:
    f = parse("attributes:a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.text = "attributes:b"  # type: ignore[misc]


# Errors.

BAD_ESCAPE = "expected an escape ("


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        # AND and OR mixed
        ("attributes:a AND attributes:b OR attributes:c", 30, "AND and OR cannot be mixed without parentheses"),
        ("attributes:a OR attributes:b AND attributes:c", 29, "AND and OR cannot be mixed without parentheses"),
        ("(attributes:a OR attributes:b) AND attributes:c OR attributes:d", 48, "cannot be mixed"),
        # keywords are upper-case
        ("attributes:a and attributes:b", 13, 'expected "AND" (keywords are upper-case), found "and"'),
        ("attributes:a Or attributes:b", 13, 'expected "OR" (keywords are upper-case), found "Or"'),
        ("not attributes:a", 0, 'expected "NOT" (keywords are case-sensitive), found "not"'),
        ("Attributes:a", 0, 'expected "attributes" (keywords are case-sensitive), found "Attributes"'),
        # functions
        ('hasSuffix(attributes.k, "x")', 0, 'found the unknown function "hasSuffix"'),
        ('f (attributes.k, "x")', 0, 'found the unknown function "f"'),
        ('HasPrefix(attributes.k, "x")', 0, "function names are case-sensitive"),
        ('hasprefix(attributes.k, "x")', 0, "function names are case-sensitive"),
        ("hasPrefix(attributes.k)", 22, 'expected "," and a prefix after the key in hasPrefix, found ")"'),
        (
            "hasPrefix(attributes.k, )",
            24,
            'expected a prefix in double quotes as the second argument of hasPrefix, found ")"',
        ),
        ('hasPrefix(attributes.k, p")', 24, 'found "p"'),
        ('hasPrefix(attributes.k, "p"', 27, 'expected ")" to close hasPrefix, found the end of the filter'),
        ('hasPrefix(attributes.k, "p", "q")', 27, 'expected ")" to close hasPrefix, found ","'),
        ('hasPrefix(attributes:k, "p")', 20, 'expected "." right after "attributes" in hasPrefix, found ":"'),
        (
            'hasPrefix("k", "p")',
            10,
            "expected attributes.KEY as the first argument of hasPrefix, found a quoted string",
        ),
        ('hasPrefix attributes.k, "p")', 10, 'expected "(" after hasPrefix, found "attributes"'),
        # strings
        ('attributes.k = "abc', 19, "expected the closing double quote of the string opened at position 15"),
        ('attributes:"abc', 15, "the string opened at position 11, found the end of the filter"),
        (
            'attributes.k = "a\\qb"',
            17,
            BAD_ESCAPE + '\\" \\\\ \\n \\t \\r \\xHH \\uHHHH or octal \\NNN up to \\377), found "\\q"',
        ),
        ('attributes.k = "\\x4g"', 16, 'found "\\x4g"'),
        ('attributes.k = "\\x4"', 16, BAD_ESCAPE),
        ('attributes.k = "\\u12"', 16, BAD_ESCAPE),
        ('attributes.k = "\\12"', 16, BAD_ESCAPE),
        ('attributes.k = "\\8"', 16, BAD_ESCAPE),
        ('attributes.k = "\\400"', 16, 'found "\\400", above \\377'),
        ('attributes.k = "\\ud83d"', 16, "a high surrogate with no \\uDC00-\\uDFFF escape right after it"),
        ('attributes.k = "\\ud83d\\u0041"', 16, "a high surrogate with no"),
        ('attributes.k = "\\ude00"', 16, "a low surrogate with no high surrogate before it"),
        ('attributes.k = "\\', 16, BAD_ESCAPE),
        # values
        ("attributes.k =", 14, 'expected a value in double quotes after "=", found the end of the filter'),
        ("attributes.k != ", 16, 'expected a value in double quotes after "!=", found the end of the filter'),
        ("attributes.k = v", 15, 'expected a value in double quotes after "=", found "v"'),
        ("attributes.k = 'v'", 15, 'found "\'"'),
        ("attributes.k = 12", 15, 'found "12"'),
        ("attributes.k", 12, 'expected "=" or "!=" after attributes.KEY, found the end of the filter'),
        ('attributes.k < "v"', 13, 'expected "=" or "!=" after attributes.KEY, found "<"'),
        ('attributes.k : "v"', 13, 'found ":"'),
        ('attributes.k == "v"', 14, 'found "="'),
        # keys
        ("attributes.", 11, 'expected an attribute key after "attributes.", found the end of the filter'),
        ('attributes. k = "v"', 11, 'expected an attribute key after "attributes.", found whitespace'),
        ('attributes .k = "v"', 10, 'no whitespace before the "."'),
        ("attributes:", 11, 'expected an attribute key after ":", found the end of the filter'),
        ('attributes:""', 11, 'found the empty string ""'),
        ("attributes:é", 11, 'found "é"'),
        ("attributes", 10, 'expected "." or ":" after "attributes", found the end of the filter'),
        ("attributes(a)", 10, 'found "("'),
        # negation
        ("- attributes:a", 1, 'expected a term right after "-", found whitespace'),
        ("NOT(attributes:a)", 3, 'expected whitespace after "NOT", found "("'),
        ("NOT", 3, 'expected whitespace after "NOT", found the end of the filter'),
        ("NOT ", 4, "found the end of the filter"),
        ("-", 1, 'expected "attributes", "hasPrefix", "NOT", "-" or "(", found the end of the filter'),
        # terms and what follows them
        ("attributes:a AND", 16, 'expected "attributes", "hasPrefix", "NOT", "-" or "(", found the end of the filter'),
        ("attributes:a AND OR attributes:b", 17, 'found "OR"'),
        ("AND attributes:a", 0, 'found "AND"'),
        ("x", 0, 'expected "attributes", "hasPrefix", "NOT", "-" or "(", found "x"'),
        (")", 0, 'found ")"'),
        ('"a"', 0, "found a quoted string"),
        ("attributes:a )", 13, 'expected "AND", "OR" or the end of the filter, found ")"'),
        ("attributes:a attributes:b", 13, 'expected "AND", "OR" or the end of the filter, found "attributes"'),
        ('attributes:a "x"', 13, "found a quoted string"),
        ('attributes.k = "é" x', 19, 'found "x"'),  # positions count characters, not bytes
        ("attributes:a AND attributes:b)", 29, 'expected "AND" or the end of the filter, found ")"'),
        ("attributes:a\r", 12, 'found "\\r"'),
        ("attributes:a ANDattributes:b", 13, 'found "ANDattributes"'),
        # parentheses
        (
            "(attributes:a",
            13,
            'expected "AND", "OR" or ")" to close the "(" at position 0, found the end of the filter',
        ),
        ("attributes:b AND (attributes:a OR attributes:c", 46, 'expected "OR" or ")" to close the "(" at position 17'),
        ("()", 1, 'expected "attributes", "hasPrefix", "NOT", "-" or "(", found ")"'),
        ("(attributes:a))", 14, 'found ")"'),
        # limits
        ("", 0, "Invalid filter: empty"),
        (" \t\n ", 0, "Invalid filter: empty"),
        ("(" * 65 + "attributes:a" + ")" * 65, 64, "expected at most 64 parentheses and NOTs open at once, found more"),
        ("-" * 65 + "attributes:a", 64, "expected at most 64 parentheses and NOTs open at once"),
        ("NOT (" * 32 + "-attributes:a" + ")" * 32, 32 * 5, "at most 64"),
    ],
)
def test_errors(text: str, position: int, fragment: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse(text)
    error = caught.value
    assert error.message.startswith("Invalid filter: ")
    assert fragment in error.message
    assert error.position == position
    assert str(error) == f"{error.message} at position {position}"


def test_error_text_for_a_400_answer() -> None:
    with pytest.raises(FilterError) as caught:
        parse("attributes:a AND attributes:b OR attributes:c")
    assert str(caught.value) == (
        'Invalid filter: AND and OR cannot be mixed without parentheses: found "OR" after "AND" at position 30'
    )
    assert isinstance(caught.value, ValueError)


def test_empty_is_an_error() -> None:
    with pytest.raises(FilterError) as caught:
        parse("")
    assert (caught.value.message, caught.value.position) == ("Invalid filter: empty", 0)


def test_length_is_counted_in_bytes_of_utf8() -> None:
    def text(payload: str) -> str:
        return f'attributes.k = "{payload}"'

    base = len(text("").encode())
    assert parse(text("x" * (MAX_BYTES - base))).matches({"k": "x" * (MAX_BYTES - base)})
    assert parse(text("é" * ((MAX_BYTES - base) // 2)))
    for too_long in (text("x" * (MAX_BYTES - base + 1)), text("é" * ((MAX_BYTES - base) // 2 + 1))):
        assert len(too_long.encode()) == MAX_BYTES + 1 or len(too_long.encode()) == MAX_BYTES + 2
        with pytest.raises(FilterError) as caught:
            parse(too_long)
        assert (caught.value.message, caught.value.position) == ("Invalid filter: longer than 256 bytes", 0)


def test_nesting_up_to_the_limit_is_fine() -> None:
    assert parse("(" * 64 + "attributes:a" + ")" * 64).matches({"a": ""})
    assert parse("-" * 64 + "attributes:a").matches({"a": ""})
    assert not parse("-" * 63 + "attributes:a").matches({"a": ""})
    assert parse("NOT (" * 32 + "attributes:a" + ")" * 32).matches({"a": ""})
    # the depth is of what is open at once, not a count over the whole filter
    assert parse(" AND ".join(["(" * 40 + "attributes:a" + ")" * 40] * 2)).matches({"a": ""})


# Fuzzing: anything in, a Filter or a FilterError out.

ATTRIBUTES = st.dictionaries(
    st.sampled_from(["a", "b", "k", "x", "iana.org/language_tag", "é"]) | st.text(max_size=3),
    st.sampled_from(["", "v", "va", "value", "é", "x"]) | st.text(max_size=4),
    max_size=5,
)
TOKENS = [
    "attributes",
    ".",
    ":",
    "=",
    "!=",
    '"',
    "(",
    ")",
    "AND",
    "OR",
    "NOT",
    "-",
    "hasPrefix",
    ",",
    "\\",
    " ",
    "\t",
    "\n",
    "a",
    "k",
    "x",
    "u",
    "0",
    "7",
    "é",
]
#: Larger pieces, so that some of the soup is well formed and gets evaluated.
PIECES = [
    "(",
    ")",
    "-",
    "attributes:a",
    "attributes.k",
    ' = "v"',
    ' != ""',
    " AND ",
    " OR ",
    "NOT ",
    "hasPrefix(attributes.k, ",
    '"va")',
]


def outcome(text: str) -> Filter | FilterError:
    try:
        return parse(text)
    except FilterError as error:
        return error


def check_total(text: str, attributes: dict[str, str]) -> None:
    result = outcome(text)  # anything but a FilterError propagates and fails the test
    if isinstance(result, FilterError):
        assert result.message.startswith("Invalid filter: ")
        assert 0 <= result.position <= len(text)
        assert str(result) == f"{result.message} at position {result.position}"
    else:
        assert isinstance(result, Filter)
        assert result.text == text
        assert isinstance(result.matches(attributes), bool)


@FUZZ
@given(st.text(max_size=300), ATTRIBUTES)
def test_any_text_gives_a_filter_or_a_filter_error(text: str, attributes: dict[str, str]) -> None:
    check_total(text, attributes)


@FUZZ
@given(
    (st.lists(st.sampled_from(TOKENS), max_size=60) | st.lists(st.sampled_from(PIECES), max_size=10)).map("".join),
    ATTRIBUTES,
)
def test_any_token_soup_gives_a_filter_or_a_filter_error(text: str, attributes: dict[str, str]) -> None:
    check_total(text, attributes)


# Fuzzing: random trees, rendered to text, read back as themselves.

NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
KEYS = st.sampled_from(["a", "b", "k-1", "K_2", "-x", "AND", "NOT", "iana.org/language_tag", "é", "with space", 'q"t'])
VALUES = st.sampled_from(["", "v", "va", "value", "é", "😀", '"', "\\", "a\nb", "\t", "\x00"]) | st.text(max_size=3)
WS0 = st.sampled_from(["", "", " ", "\t", "\n", "  "])
WS1 = st.sampled_from([" ", " ", "\t", "\n", " \n "])
Rendered = tuple[Node, str, int]  # a tree, its text, the most parentheses and NOTs open at once in it


@st.composite
def quoted(draw: st.DrawFn, value: str) -> str:
    """``value`` as a string literal, each character written in one of the ways it may be."""
    out: list[str] = []
    for ch in value:
        code = ord(ch)
        forms = [] if ch in '"\\' else [ch]
        forms += {'"': ['\\"'], "\\": ["\\\\"], "\n": ["\\n"], "\t": ["\\t"], "\r": ["\\r"]}.get(ch, [])
        if code <= 0xFF:
            forms += [f"\\x{code:02x}", f"\\x{code:02X}", f"\\{code:03o}"]
        if code <= 0xFFFF:
            forms.append(f"\\u{code:04x}")
        else:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            forms.append(f"\\u{high:04x}\\u{low:04X}")
        out.append(draw(st.sampled_from(forms)))
    return '"' + "".join(out) + '"'


@st.composite
def rendered_key(draw: st.DrawFn, key: str) -> str:
    if all(ch in NAME_CHARS for ch in key) and draw(st.booleans()):
        return key
    return draw(quoted(key))


@st.composite
def leaves(draw: st.DrawFn) -> Rendered:
    kind = draw(st.sampled_from(["has", "eq", "ne", "prefix"]))
    key = draw(KEYS)
    k = draw(rendered_key(key))
    if kind == "has":
        return Has(key), f"attributes{draw(WS0)}:{draw(WS0)}{k}", 0
    value = draw(VALUES)
    v = draw(quoted(value))
    if kind == "eq":
        return Eq(key, value), f"attributes.{k}{draw(WS0)}={draw(WS0)}{v}", 0
    if kind == "ne":
        return Ne(key, value), f"attributes.{k}{draw(WS0)}!={draw(WS0)}{v}", 0
    ws = [draw(WS0) for _ in range(5)]
    return Prefix(key, value), f"hasPrefix{ws[0]}({ws[1]}attributes.{k}{ws[2]},{ws[3]}{v}{ws[4]})", 0


@st.composite
def parenthesized(draw: st.DrawFn, rendered: Rendered, needed: bool) -> tuple[str, int]:
    _, text, depth = rendered
    if needed or draw(st.booleans()):
        return f"({draw(WS0)}{text}{draw(WS0)})", depth + 1
    return text, depth


@st.composite
def negated(draw: st.DrawFn, children: st.SearchStrategy[Rendered]) -> Rendered:
    child = draw(children)
    text, depth = draw(parenthesized(child, isinstance(child[0], And | Or)))
    return Not(child[0]), draw(st.sampled_from(["NOT ", "NOT\t", "NOT\n ", "-"])) + text, depth + 1


@st.composite
def joined(draw: st.DrawFn, children: st.SearchStrategy[Rendered]) -> Rendered:
    keyword = draw(st.sampled_from(["AND", "OR"]))
    children_drawn = draw(st.lists(children, min_size=2, max_size=3))
    parts = [draw(parenthesized(child, isinstance(child[0], And | Or))) for child in children_drawn]
    text = parts[0][0]
    for part, _ in parts[1:]:
        text += f"{draw(WS1)}{keyword}{draw(WS1)}{part}"
    nodes = tuple(node for node, _, _ in children_drawn)
    tree: Node = And(nodes) if keyword == "AND" else Or(nodes)
    return tree, text, max(depth for _, depth in parts)


TREES = st.recursive(leaves(), lambda children: negated(children) | joined(children), max_leaves=6)


def evaluate(node: Node, attributes: dict[str, str]) -> bool:
    """What the filter language says a tree means, written apart from the module's own."""
    match node:
        case Has(key):
            return key in attributes
        case Eq(key, value):
            return attributes.get(key) == value
        case Ne(key, value):
            return attributes.get(key) != value
        case Prefix(key, prefix):
            found = attributes.get(key)
            return found is not None and found.startswith(prefix)
        case Not(term):
            return not evaluate(term, attributes)
        case And(terms):
            return all(evaluate(term, attributes) for term in terms)
        case Or(terms):
            return any(evaluate(term, attributes) for term in terms)
    raise AssertionError(node)


@FUZZ
@given(TREES, WS0, WS0, st.lists(ATTRIBUTES, min_size=1, max_size=4))
def test_a_rendered_tree_reads_back_as_itself(
    rendered: Rendered, before: str, after: str, samples: list[dict[str, str]]
) -> None:
    tree, text, depth = rendered
    text = before + text + after
    assume(len(text.encode()) <= MAX_BYTES and depth <= 64)
    parsed = parse(text)
    assert parsed.tree == tree
    for attributes in samples:
        assert parsed.matches(attributes) is evaluate(tree, attributes)
