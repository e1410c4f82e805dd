"""``ams probe``: a monitoring check of the publish → pull round trip, in the Nagios convention
(docs/monitoring.md, "The probe").

It makes sure the probe topic and subscription exist, publishes one message carrying a nonce,
pulls (acknowledging everything it pulls) until the nonce comes back or the critical threshold
passes, and prints one status line with performance data. Exit codes: 0 OK, 1 WARNING (slower
than ``--warning``), 2 CRITICAL (an HTTP or connection failure, or the message not back within
``--critical``), 3 UNKNOWN (bad arguments, or a failure of the probe itself).

A plain client of the AMS HTTP API, like ``ams republish``: it needs none of the service's
settings or data."""

from __future__ import annotations

import argparse
import base64
import os
import re
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

import requests
from urllib3.exceptions import InsecureRequestWarning

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}
#: Messages one pull asks for: earlier runs' leftovers are drained (and acknowledged) this many at a time.
PULL_BATCH = 10
#: Pauses between pulls that came back empty: the first, doubling up to the last.
PAUSE_FIRST = 0.05
PAUSE_MAX = 0.5
#: The attribute that carries the nonce.
ATTRIBUTE = "probe"
#: The API's rule for project, topic and subscription names.
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class BadArguments(Exception):
    """The command line is wrong: UNKNOWN."""


class Failed(Exception):
    """The service failed the check: CRITICAL, with this text."""


@dataclass(frozen=True)
class Options:
    url: str  # the service root, without /v1
    token: str
    project: str
    topic: str
    subscription: str
    warning: float
    critical: float
    timeout: float
    verify: bool | str

    @property
    def topic_name(self) -> str:
        return f"projects/{self.project}/topics/{self.topic}"

    @property
    def subscription_name(self) -> str:
        return f"projects/{self.project}/subscriptions/{self.subscription}"


@dataclass(frozen=True)
class Result:
    """A round trip that came back: seconds, in all and per step."""

    total: float
    publish: float
    pull: float


# --------------------------------------------------------------------------- arguments ----
class _Parser(argparse.ArgumentParser):
    """argparse, with bad arguments UNKNOWN (3) instead of argparse's exit 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise BadArguments(message)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", required=True, help="the service root, e.g. https://ams.example.org:8443 (/v1 optional)"
    )
    secret = parser.add_mutually_exclusive_group(required=True)
    secret.add_argument("--token", help="the token, sent as x-api-key (visible in process listings: see --token-file)")
    secret.add_argument("--token-file", metavar="PATH", help="a file whose first line is the token")
    parser.add_argument("--project", required=True, help="the project of the probe's topic and subscription")
    parser.add_argument("--topic", default="ams-probe", help="the topic to publish to (default ams-probe)")
    parser.add_argument("--subscription", default="ams-probe", help="the subscription to pull (default ams-probe)")
    parser.add_argument(
        "--warning", type=float, default=2.0, metavar="SECONDS", help="WARNING above this round trip (default 2)"
    )
    parser.add_argument(
        "--critical",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="CRITICAL above this round trip; the message is given up then (default 10)",
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="bound of each HTTP request (default 10)"
    )
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument("--ca-file", metavar="PATH", help="CA bundle that verifies the server (default: the system's)")
    trust.add_argument("--insecure", action="store_true", help="do not verify the server's certificate")


def parse(argv: Sequence[str]) -> Options:
    """The checked options of ``argv``; :class:`BadArguments` when they are wrong."""
    parser = _Parser(
        prog="ams probe",
        description="Publish one message and pull it back; report in the Nagios convention "
        "(exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    url = args.url.strip().rstrip("/")
    url = url.removesuffix("/v1").rstrip("/")
    if not re.fullmatch(r"https?://[^/\s]+(/[^\s]*)?", url):
        raise BadArguments(f"--url: {args.url!r} is not an http(s):// URL of the service")
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as stream:
                token = stream.readline().strip()
        except OSError as exc:
            raise BadArguments(f"--token-file: cannot read {args.token_file}: {exc.strerror or exc}") from None
    else:
        token = args.token.strip()
    if not token:
        raise BadArguments(
            "--token is empty" if args.token_file is None else f"--token-file: {args.token_file} is empty"
        )
    for option in ("project", "topic", "subscription"):
        value = getattr(args, option)
        if not _NAME.fullmatch(value):
            raise BadArguments(f"--{option}: {value!r} is not a valid name (letters, digits, _ and -)")
    if not args.warning >= 0:  # also NaN
        raise BadArguments("--warning must not be negative")
    if not args.critical > 0:
        raise BadArguments("--critical must be positive")
    if args.warning > args.critical:
        raise BadArguments(f"--warning {args.warning:g} is above --critical {args.critical:g}")
    if not args.timeout > 0:
        raise BadArguments("--timeout must be positive")
    verify: bool | str = True
    if args.insecure:
        verify = False
    elif args.ca_file is not None:
        if not os.path.isfile(args.ca_file):
            raise BadArguments(f"--ca-file: no file at {args.ca_file}")
        verify = args.ca_file
    return Options(
        url=url,
        token=token,
        project=args.project,
        topic=args.topic,
        subscription=args.subscription,
        warning=args.warning,
        critical=args.critical,
        timeout=args.timeout,
        verify=verify,
    )


# --------------------------------------------------------------------------------- HTTP ----
@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the decoded JSON, or None
    reason: str  # the HTTP reason phrase

    @property
    def message(self) -> str:
        """The error message of the AMS envelope, else the reason phrase, after the status."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        if not isinstance(text, str) or not text:
            text = self.reason
        return f"{self.status} {text}".strip()


class Client:
    """The API under ``{url}/v1`` over one ``requests`` Session, the token in ``x-api-key``."""

    def __init__(self, options: Options) -> None:
        self.root = options.url
        self.base = options.url + "/v1"
        self.timeout = options.timeout
        self.verify = options.verify
        self.session = requests.Session()
        self.session.headers["x-api-key"] = options.token

    def call(self, step: str, method: str, path: str, body: Any | None = None) -> Reply:
        """One request; :class:`Failed` (saying which ``step``) when no answer came."""
        try:
            response = self.session.request(
                method,
                self.base + path,
                json=body,
                timeout=self.timeout,
                verify=self.verify,  # per request: a session's verify loses to REQUESTS_CA_BUNDLE
            )
        except requests.Timeout as exc:
            raise Failed(f"{step}: no answer from {self.root} within {self.timeout:g} s") from exc
        except requests.RequestException as exc:
            raise Failed(f"{step}: cannot reach {self.root}: {_reason(exc)}") from exc
        try:
            decoded = response.json() if response.content else None
        except ValueError:
            decoded = None  # e.g. a proxy's page: the status and reason say enough
        return Reply(response.status_code, decoded, response.reason or "")

    def close(self) -> None:
        self.session.close()


def _reason(exc: requests.RequestException) -> str:
    """The cause of a connection failure, without urllib3's wrapping (pool, retries, object)."""
    inner: Any = exc.args[0] if exc.args else None
    cause = getattr(inner, "reason", None) or inner or exc
    text = str(cause)
    text = re.sub(r"^<[^>]*>: ", "", text)  # urllib3 1.x: "<...Connection object at 0x..>: "
    text = re.sub(r"^\w*Connection(Pool)?\([^)]*\): ", "", text)  # urllib3 2.x: "HTTPSConnection(host=.., port=..): "
    return text or type(exc).__name__


# -------------------------------------------------------------------------------- check ----
def _ensure_topic(client: Client, options: Options) -> None:
    path = f"/projects/{options.project}/topics/{options.topic}"
    reply = client.call("topic", "GET", path)
    if reply.status == 200:
        return
    if reply.status != 404:
        raise Failed(f"topic {options.topic_name}: {reply.message}")
    created = client.call("create topic", "PUT", path)
    if created.status not in (200, 409):  # 409: another probe made it meanwhile
        raise Failed(f"cannot create topic {options.topic_name}: {created.message}{_rights(options, created)}")


def _ensure_subscription(client: Client, options: Options) -> str | None:
    """The subscription exists (made when missing); the topic it is attached to, when known."""
    path = f"/projects/{options.project}/subscriptions/{options.subscription}"
    reply = client.call("subscription", "GET", path)
    if reply.status == 200:
        topic = reply.body.get("topic") if isinstance(reply.body, dict) else None
        return topic.strip("/") if isinstance(topic, str) else None
    if reply.status != 404:
        raise Failed(f"subscription {options.subscription_name}: {reply.message}")
    created = client.call("create subscription", "PUT", path, {"topic": options.topic_name})
    if created.status not in (200, 409):
        raise Failed(
            f"cannot create subscription {options.subscription_name}: {created.message}{_rights(options, created)}"
        )
    return options.topic_name if created.status == 200 else None


def _rights(options: Options, reply: Reply) -> str:
    if reply.status in (401, 403):
        return f" (creating it takes a project_admin of {options.project}; or create it beforehand)"
    return ""


def _carries(item: Any, nonce: str) -> bool:
    """Is this pulled item the message of this run (by its attribute, else by its data)?"""
    message = item.get("message") if isinstance(item, dict) else None
    if not isinstance(message, dict):
        return False
    attributes = message.get("attributes")
    if isinstance(attributes, dict) and attributes.get(ATTRIBUTE) == nonce:
        return True
    try:
        return base64.b64decode(str(message.get("data", "")), validate=True).decode() == nonce
    except (ValueError, UnicodeDecodeError):
        return False


def run(
    options: Options,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Result:
    """The round trip; :class:`Failed` when the service fails it."""
    client = Client(options)
    try:
        _ensure_topic(client, options)
        attached_to = _ensure_subscription(client, options)
        sub_path = f"/projects/{options.project}/subscriptions/{options.subscription}"
        nonce = f"{uuid.uuid4()}-{time.time_ns()}"
        message = {"data": base64.b64encode(nonce.encode()).decode(), "attributes": {ATTRIBUTE: nonce}}
        start = clock()
        reply = client.call(
            "publish", "POST", f"/projects/{options.project}/topics/{options.topic}:publish", {"messages": [message]}
        )
        if reply.status != 200:
            raise Failed(f"publish: {reply.message}")
        if not isinstance(reply.body, dict) or not reply.body.get("messageIds"):
            raise Failed(f"publish: {reply.status} answer without messageIds (not the AMS API?)")
        published = clock()
        pause = PAUSE_FIRST
        while True:
            pull = {"maxMessages": str(PULL_BATCH), "returnImmediately": "true"}
            reply = client.call("pull", "POST", sub_path + ":pull", pull)
            if reply.status != 200:
                raise Failed(f"pull: {reply.message}")
            received = reply.body.get("receivedMessages") if isinstance(reply.body, dict) else None
            if not isinstance(received, list):
                raise Failed(f"pull: {reply.status} answer without receivedMessages (not the AMS API?)")
            now = clock()
            found = any(_carries(item, nonce) for item in received)
            ack_ids = [item["ackId"] for item in received if isinstance(item, dict) and "ackId" in item]
            if ack_ids:  # this run's message and any other: nothing is left to pile up
                acked = client.call("acknowledge", "POST", sub_path + ":acknowledge", {"ackIds": ack_ids})
                if acked.status != 200:
                    raise Failed(f"acknowledge: {acked.message}")
            if found:
                return Result(total=now - start, publish=published - start, pull=now - published)
            if now - start >= options.critical:
                raise Failed(f"message not pulled back within {options.critical:g} s{_hint(options, attached_to)}")
            if not received:
                sleep(max(0.0, min(pause, start + options.critical - now)))
                pause = min(pause * 2, PAUSE_MAX)
    finally:
        client.close()


def _hint(options: Options, attached_to: str | None) -> str:
    if attached_to is not None and attached_to != options.topic_name:
        return f" (subscription {options.subscription_name} is attached to {attached_to}, not {options.topic_name})"
    return ""


# ------------------------------------------------------------------------------- output ----
def _threshold(value: float) -> str:
    """A threshold as Nagios reads a number in performance data: digits and a point, never an
    exponent (``:g`` writes 0.000001 as 1e-06), no trailing zeros."""
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def status_line(code: int, text: str, perfdata: str = "") -> str:
    """``AMS STATE - text | perfdata`` on one line ('|' would start the performance data)."""
    text = " ".join(text.replace("|", "/").split())
    line = f"AMS {STATES[code]} - {text}"
    return f"{line} | {perfdata}" if perfdata else line


def judge(options: Options, result: Result) -> tuple[int, str]:
    """The exit code and the status line of a round trip that came back."""
    text = f"published and pulled back 1 message in {result.total:.3f} s"
    if result.total > options.critical:
        code, text = CRITICAL, f"{text} (critical above {_threshold(options.critical)} s)"
    elif result.total > options.warning:
        code, text = WARNING, f"{text} (warning above {_threshold(options.warning)} s)"
    else:
        code = OK
    perfdata = (
        f"time={result.total:.3f}s;{_threshold(options.warning)};{_threshold(options.critical)};0 "
        f"publish={result.publish:.3f}s pull={result.pull:.3f}s"
    )
    return code, status_line(code, text, perfdata)


def main(argv: Sequence[str] | None = None) -> int:
    """``ams probe ...``: print one status line, return the Nagios exit code."""
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except BadArguments as exc:
        print(status_line(UNKNOWN, f"bad arguments: {exc}"))
        return UNKNOWN
    try:
        with warnings.catch_warnings():
            if options.verify is False:  # asked for: not worth a warning on every run
                warnings.simplefilter("ignore", InsecureRequestWarning)
            result = run(options)
    except Failed as exc:
        print(status_line(CRITICAL, str(exc)))
        return CRITICAL
    except Exception as exc:  # the probe's own failure: never a traceback, UNKNOWN
        print(status_line(UNKNOWN, f"probe failed: {type(exc).__name__}: {exc}"))
        return UNKNOWN
    code, line = judge(options, result)
    print(line)
    return code
