#!/usr/bin/env python3
"""Build the systemd container image the Molecule scenarios run on, from Debian's packages only.

    python tools/image.py setup     # apt: podman, runc, debootstrap; /etc/containers/containers.conf (idempotent)
    python tools/image.py build     # debootstrap bookworm -> podman import localhost/ams-debian:bookworm
    python tools/image.py check     # boot one container with systemd as PID 1, wait for "running", remove it

There is no image registry on this machine, so the image is made here: ``debootstrap --variant=minbase``
with systemd, python3 (and python3-apt for Ansible's apt module) and a JRE, units that make no sense in
a container masked, then ``tar | podman import`` with ``/sbin/init`` as the command. ``build`` is
skipped while an image with the same inputs exists: the inputs (suite, variant, package list, masked
and disabled units, image config, ``IMAGE_VERSION``) are hashed into the image label
``INPUTS_LABEL``. See docs/ansible.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import toolkit

# --- what the image is ----------------------------------------------------------------------
#: Bump to force a rebuild when something not in the lists below changes (the rootfs tweaks).
IMAGE_VERSION = 3
IMAGE = "localhost/ams-debian:bookworm"
SUITE = "bookworm"
VARIANT = "minbase"
#: Everything every node needs, baked in so converges stay fast.
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "python3",
    "python3-apt",  # ansible.builtin.apt imports it
    "sudo",
    "ca-certificates",
    "procps",
    "iproute2",
    "curl",
    "openjdk-17-jre-headless",
    # what the roles install from apt, so that a converge needs no package index: the multi-host
    # scenario's containers have no route out (molecule/multinode), and eleven apt-get updates cost minutes
    "python3-venv",  # ams, spark, mongodb: the roles' virtualenvs
    "python3-packaging",  # ansible.builtin.pip needs it on the host
    "python3-yaml",  # mongodb
    "libzookeeper-java",  # zookeeper
    "haproxy",
    "socat",  # haproxy: the role's server_state talks to the stats socket
    "openssl",  # haproxy: the stats password hash
    "prometheus",  # prometheus: the monitoring host (promtool with it)
    "prometheus-alertmanager",  # prometheus: the monitoring host
    "prometheus-node-exporter",  # prometheus: node exporter on every host
    "nftables",  # firewall: nft and nftables.service (Debian does not enable it at install: not in DISABLED_UNITS)
)
#: Services the baked-in packages enable at install, off in the image: the role that needs one
#: configures it, then enables and starts it (haproxy would run Debian's sample configuration on
#: every host).
DISABLED_UNITS: tuple[str, ...] = (
    "haproxy.service",
    "prometheus.service",
    "prometheus-alertmanager.service",
    "prometheus-node-exporter.service",
)
#: Units that cannot work (no consoles, no udev, no kernel modules) or that would race a converge
#: for the dpkg lock (the apt timers): linked to /dev/null.
MASKED_UNITS: tuple[str, ...] = (
    "getty.target",
    "getty@tty1.service",
    "console-getty.service",
    "getty-static.service",
    "serial-getty@.service",
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service",
    "systemd-udev-settle.service",
    "systemd-modules-load.service",
    "systemd-remount-fs.service",
    "systemd-firstboot.service",
    "systemd-pstore.service",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-fs-fuse-connections.mount",
    "proc-sys-fs-binfmt_misc.automount",
    "e2scrub_reap.service",
    "e2scrub_all.timer",
    "fstrim.timer",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
)
#: The image config ``podman import --change`` sets (an imported tarball has none, not even PATH).
IMAGE_CHANGES: tuple[str, ...] = (
    'CMD ["/sbin/init"]',
    "STOPSIGNAL SIGRTMIN+3",
    "ENV container=podman",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
)
INPUTS_LABEL = "org.argo-ams.image-inputs"
FALLBACK_MIRROR = "http://deb.debian.org/debian"
FALLBACK_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# --- the host -------------------------------------------------------------------------------
#: Debian packages ``setup`` installs on the host.
HOST_PACKAGES: tuple[str, ...] = ("podman", "runc", "debootstrap")
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
CONTAINERS_CONF_MARKER = "# Written by tools/image.py"
#: crun (Debian 12: 1.8.1) cannot run systemd on cgroups v1 hybrid hosts and cannot set rlimits there;
#: the hard nofile limit inside this sandbox is below podman's default, hence explicit ulimits.
RUNTIME = "runc"
ULIMITS: tuple[str, ...] = ("nofile=1024:1024", "nproc=4096:4096")
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))

# --- places ---------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
WORK_DIR = ROOT / ".cache" / "image"
ROOTFS = WORK_DIR / "rootfs"
BUILD_LOG = WORK_DIR / "debootstrap.log"

# --- bounds ---------------------------------------------------------------------------------
APT_TIMEOUT = 900.0
DEBOOTSTRAP_TIMEOUT = 1800.0
IMPORT_TIMEOUT = 900.0
PODMAN_TIMEOUT = 120.0
BOOT_TIMEOUT = 90.0
LOG_TAIL_LINES = toolkit.LOG_TAIL_LINES


class ImageError(RuntimeError):
    """The image could not be set up, built or booted; the message says why."""


def say(message: str) -> None:
    print(f"image: {message}", file=sys.stderr, flush=True)


# ============================================================================================
# pure parts (no side effects)
# ============================================================================================
@dataclass(frozen=True)
class AptSource:
    """One ``deb`` entry of the host's apt configuration."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_one_line_sources(text: str) -> list[AptSource]:
    """Entries of a ``sources.list`` file: ``deb [options] URI SUITE COMPONENT...``."""
    found: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            found.append(AptSource(uri=words[0], suites=(words[1],), components=tuple(words[2:])))
    return found


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Entries of a deb822 ``*.sources`` file (stanzas separated by blank lines)."""
    found: list[AptSource] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key:
                fields[key] += " " + raw.strip()
                continue
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        components = tuple(fields.get("components", "").split())
        found.extend(AptSource(uri=uri, suites=suites, components=components) for uri in fields.get("uris", "").split())
    return found


def host_apt_sources(places: Iterable[Path] = APT_SOURCES) -> list[AptSource]:
    """Every ``deb`` entry apt itself reads (``*.list`` and ``*.sources``; apt ignores other names)."""
    files: list[Path] = []
    for place in places:
        if place.is_dir():
            files.extend(sorted(p for p in place.iterdir() if p.suffix in (".list", ".sources")))
        elif place.is_file():
            files.append(place)
    found: list[AptSource] = []
    for path in files:
        text = path.read_text(errors="replace")
        found.extend(parse_deb822_sources(text) if path.suffix == ".sources" else parse_one_line_sources(text))
    return found


def pick_mirror(sources: Sequence[AptSource], suite: str = SUITE) -> tuple[str, str]:
    """(archive mirror, security mirror) for ``suite``: the host's own, else deb.debian.org.

    ``AMS_IMAGE_MIRROR`` / ``AMS_IMAGE_SECURITY_MIRROR`` override both.
    """
    mirror = os.environ.get("AMS_IMAGE_MIRROR", "").strip()
    security = os.environ.get("AMS_IMAGE_SECURITY_MIRROR", "").strip()
    for source in sources:
        if not source.uri.startswith(("http://", "https://")) or "main" not in source.components:
            continue
        if not mirror and suite in source.suites:
            mirror = source.uri
        if not security and f"{suite}-security" in source.suites:
            security = source.uri
    return (mirror or FALLBACK_MIRROR).rstrip("/"), (security or FALLBACK_SECURITY_MIRROR).rstrip("/")


def render_image_sources(mirror: str, security: str, suite: str = SUITE) -> str:
    """The deb822 apt sources baked into the image, so roles can ``apt-get update`` and install."""
    return (
        "# Written by tools/image.py: the mirrors of the machine that built this image.\n"
        f"Types: deb\nURIs: {mirror}\nSuites: {suite} {suite}-updates\nComponents: main\nSigned-By: {KEYRING}\n\n"
        f"Types: deb\nURIs: {security}\nSuites: {suite}-security\nComponents: main\nSigned-By: {KEYRING}\n"
    )


def render_containers_conf(runtime: str = RUNTIME, ulimits: Sequence[str] = ULIMITS) -> str:
    limits = "".join(f'  "{limit}",\n' for limit in ulimits)
    return (
        f"{CONTAINERS_CONF_MARKER} (AMS Molecule tests): systemd as PID 1 needs runc here,\n"
        "# and the hard nofile limit of this machine is below podman's default. See docs/ansible.md.\n"
        "[containers]\n"
        f"default_ulimits = [\n{limits}]\n"
        "\n"
        "[engine]\n"
        f'runtime = "{runtime}"\n'
    )


def inputs_digest(
    *,
    version: int = IMAGE_VERSION,
    suite: str = SUITE,
    variant: str = VARIANT,
    packages: Sequence[str] = PACKAGES,
    masked: Sequence[str] = MASKED_UNITS,
    disabled: Sequence[str] = DISABLED_UNITS,
    changes: Sequence[str] = IMAGE_CHANGES,
) -> str:
    """A short hash of everything that decides the image's content (not the mirror it came from)."""
    blob = json.dumps(
        {
            "version": version,
            "suite": suite,
            "variant": variant,
            "packages": sorted(packages),
            "masked": sorted(masked),
            "disabled": sorted(disabled),
            "changes": list(changes),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def debootstrap_argv(target: Path, mirror: str) -> list[str]:
    return [
        "debootstrap",
        f"--variant={VARIANT}",
        f"--include={','.join(PACKAGES)}",
        f"--keyring={KEYRING}",
        SUITE,
        str(target),
        mirror,
    ]


def podman_run_argv(name: str, image: str = IMAGE) -> list[str]:
    """How a test container is started: systemd as PID 1 on runc, host networking, explicit ulimits."""
    limits = [arg for limit in ULIMITS for arg in ("--ulimit", limit)]
    return [
        "podman",
        "--runtime",
        RUNTIME,
        "run",
        "-d",
        "--name",
        name,
        "--systemd=always",
        "--network",
        "host",
        *limits,
        image,
        "/sbin/init",
    ]


# ============================================================================================
# commands
# ============================================================================================
def _run(
    argv: Sequence[str],
    *,
    timeout: float,
    what: str,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return toolkit.run(
        argv, timeout=timeout, what=what, error=ImageError, hint="python tools/image.py setup", env=env, cwd=cwd
    )


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"{what} needs root (rootful podman, apt-get, debootstrap)")


def _dpkg_installed(package: str) -> bool:
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, timeout=30, check=False
        )
    except FileNotFoundError:
        return False
    return done.returncode == 0 and done.stdout.strip() == "install ok installed"


def missing_host_packages(packages: Sequence[str] = HOST_PACKAGES) -> list[str]:
    return [p for p in packages if not _dpkg_installed(p)]


def install_host_packages(packages: Sequence[str]) -> None:
    if not packages:
        say(f"{', '.join(HOST_PACKAGES)}: installed")
        return
    _require_root("apt-get install")
    say(f"apt-get install {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update"], timeout=APT_TIMEOUT, what="apt-get update", env=env)
    _run(
        ["apt-get", "install", "-y", "--no-install-recommends", *packages],
        timeout=APT_TIMEOUT,
        what="apt-get install",
        env=env,
    )


def write_containers_conf(path: Path = CONTAINERS_CONF, *, force: bool = False) -> bool:
    """Write ``path`` unless it already says the same; never clobber a file this tool did not write."""
    wanted = render_containers_conf()
    if path.exists():
        current = path.read_text()
        if current == wanted:
            say(f"{path}: up to date")
            return False
        if not current.startswith(CONTAINERS_CONF_MARKER) and not force:
            raise ImageError(
                f"{path} exists and was not written by tools/image.py; merge this in, or rerun setup with --force:\n"
                + wanted
            )
    _require_root(f"writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(wanted)
    say(f"{path}: runtime {RUNTIME}, ulimits {' '.join(ULIMITS)}")
    return True


def setup(*, force: bool = False) -> None:
    install_host_packages(missing_host_packages())
    write_containers_conf(force=force)
    runtime = _run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], timeout=PODMAN_TIMEOUT, what="podman info"
    )
    if runtime.stdout.strip() != RUNTIME:
        raise ImageError(
            f"podman uses the {runtime.stdout.strip()!r} runtime, not {RUNTIME!r}: check {CONTAINERS_CONF}"
        )


def image_digest(image: str = IMAGE) -> str | None:
    """The inputs label of ``image``, "" when it has none, None when there is no such image."""
    exists = subprocess.run(
        ["podman", "image", "exists", image], capture_output=True, timeout=PODMAN_TIMEOUT, check=False
    )
    if exists.returncode != 0:
        return None
    done = _run(
        ["podman", "image", "inspect", "--format", "{{json .Labels}}", image],
        timeout=PODMAN_TIMEOUT,
        what="podman image inspect",
    )
    labels = json.loads(done.stdout.strip() or "null") or {}
    return str(labels.get(INPUTS_LABEL, ""))


def _mask_units(rootfs: Path, units: Iterable[str]) -> None:
    system = rootfs / "etc" / "systemd" / "system"
    system.mkdir(parents=True, exist_ok=True)
    for unit in units:
        link = system / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")


def _trim_rootfs(rootfs: Path, mirror: str, security: str) -> None:
    """Make the debootstrapped tree a container image: per-container identity, our apt sources, no caches."""
    # systemd makes a machine id at each boot of an empty file; the host's name and resolver stay outside.
    (rootfs / "etc" / "machine-id").write_text("")
    (rootfs / "var" / "lib" / "dbus" / "machine-id").unlink(missing_ok=True)
    (rootfs / "etc" / "hostname").write_text("localhost\n")
    (rootfs / "etc" / "resolv.conf").write_text("")
    (rootfs / "etc" / "apt" / "sources.list").unlink(missing_ok=True)
    (rootfs / "etc" / "apt" / "sources.list.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc" / "apt" / "sources.list.d" / "debian.sources").write_text(render_image_sources(mirror, security))
    lists = rootfs / "var" / "lib" / "apt" / "lists"
    for cache in (rootfs / "var" / "cache" / "apt" / "archives", lists):
        for entry in cache.glob("*"):
            if entry.is_file() and entry.name != "lock":
                entry.unlink()
    # No package index in the image: make it look ancient, so the first ``apt: update_cache: true,
    # cache_valid_time: N`` of a converge downloads one (apt's modules judge freshness by these mtimes).
    (rootfs / "var" / "lib" / "apt" / "periodic" / "update-success-stamp").unlink(missing_ok=True)
    os.utime(lists, (0, 0))
    for log in ("bootstrap.log", "dpkg.log", "alternatives.log"):
        (rootfs / "var" / "log" / log).unlink(missing_ok=True)
    _mask_units(rootfs, MASKED_UNITS)
    # a baked-in package's service stays off until its role configures and enables it
    for wanted in (rootfs / "etc" / "systemd" / "system").glob("*.wants/*"):
        if wanted.name in DISABLED_UNITS:
            wanted.unlink()


def _import(rootfs: Path, digest: str, image: str = IMAGE) -> None:
    changes = [*IMAGE_CHANGES, f"LABEL {INPUTS_LABEL}={digest}"]
    change_args = [arg for change in changes for arg in ("--change", change)]
    tar_argv = ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."]
    import_argv = ["podman", "import", *change_args, "-", image]
    say(f"{' '.join(tar_argv)} | {' '.join(import_argv)}")
    with subprocess.Popen(tar_argv, stdout=subprocess.PIPE) as tar:
        try:
            imported = subprocess.run(
                import_argv, stdin=tar.stdout, capture_output=True, text=True, timeout=IMPORT_TIMEOUT, check=False
            )
        finally:
            if tar.stdout is not None:
                tar.stdout.close()
        tar_rc = tar.wait(timeout=IMPORT_TIMEOUT)
    if tar_rc != 0 or imported.returncode != 0:
        raise ImageError(
            f"podman import failed (tar exit {tar_rc}, podman exit {imported.returncode}):\n{imported.stderr.strip()}"
        )


def build(*, force: bool = False, keep_rootfs: bool = False) -> bool:
    """Build ``IMAGE`` unless one with the same inputs exists; True when it was built."""
    digest = inputs_digest()
    current = image_digest()
    if current == digest and not force:
        say(f"{IMAGE}: up to date (inputs {digest})")
        return False
    _require_root("build")
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        raise ImageError("debootstrap not found (python tools/image.py setup)")
    why = "no image" if current is None else f"inputs {current or 'unknown'} != {digest}"
    say(f"{IMAGE}: {why}; building")
    mirror, security = pick_mirror(host_apt_sources())
    started = time.monotonic()
    if ROOTFS.exists():
        shutil.rmtree(ROOTFS)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    argv = debootstrap_argv(ROOTFS, mirror)
    say(" ".join(argv) + f"  (log: {BUILD_LOG})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    with BUILD_LOG.open("w") as log:
        try:
            done = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, timeout=DEBOOTSTRAP_TIMEOUT, check=False, env=env
            )
        except subprocess.TimeoutExpired as exc:
            raise ImageError(f"debootstrap: no result after {DEBOOTSTRAP_TIMEOUT:.0f}s (log: {BUILD_LOG})") from exc
    if done.returncode != 0:
        tail = BUILD_LOG.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        debootstrap_log = ROOTFS / "debootstrap" / "debootstrap.log"
        if debootstrap_log.exists():
            tail += debootstrap_log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        raise ImageError(f"debootstrap failed (exit {done.returncode}):\n" + "\n".join(tail))
    say(f"debootstrap done in {time.monotonic() - started:.0f}s")
    _trim_rootfs(ROOTFS, mirror, security)
    if current is not None:
        _run(["podman", "rmi", "--force", IMAGE], timeout=PODMAN_TIMEOUT, what="podman rmi (old image)")
    _import(ROOTFS, digest)
    if not keep_rootfs:
        shutil.rmtree(ROOTFS)
    say(f"{IMAGE}: built in {time.monotonic() - started:.0f}s (inputs {digest})")
    return True


def _system_state(name: str) -> str:
    done = subprocess.run(
        ["podman", "exec", name, "systemctl", "is-system-running"],
        capture_output=True,
        text=True,
        timeout=PODMAN_TIMEOUT,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip()


def check(image: str = IMAGE, timeout: float = BOOT_TIMEOUT) -> str:
    """Boot ``image`` with systemd as PID 1; return the state it settled in ("running" or "degraded")."""
    name = f"ams-image-check-{uuid.uuid4().hex[:8]}"
    _run(podman_run_argv(name, image), timeout=PODMAN_TIMEOUT, what="podman run")
    try:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = _system_state(name)
            if state in ("running", "degraded"):
                break
            time.sleep(1.0)
        else:
            logs = subprocess.run(
                ["podman", "logs", name], capture_output=True, text=True, timeout=PODMAN_TIMEOUT, check=False
            )
            raise ImageError(
                f"systemd in {image} did not settle within {timeout:.0f}s (last: {state!r})\n{logs.stdout}{logs.stderr}"
            )
        if state == "degraded":
            failed = subprocess.run(
                ["podman", "exec", name, "systemctl", "--failed", "--no-legend", "--plain"],
                capture_output=True,
                text=True,
                timeout=PODMAN_TIMEOUT,
                check=False,
            )
            say(f"degraded; failed units:\n{failed.stdout.strip()}")
        return state
    finally:
        subprocess.run(
            ["podman", "rm", "--force", "--time", "5", name], capture_output=True, timeout=PODMAN_TIMEOUT, check=False
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="image.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    setup_cmd = sub.add_parser("setup", help="install podman, runc, debootstrap; write containers.conf")
    setup_cmd.add_argument(
        "--force", action="store_true", help=f"overwrite a {CONTAINERS_CONF} this tool did not write"
    )
    build_cmd = sub.add_parser("build", help=f"debootstrap and import {IMAGE} (skipped while up to date)")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even when the inputs are unchanged")
    build_cmd.add_argument(
        "--keep-rootfs", action="store_true", help=f"keep {ROOTFS.relative_to(ROOT)} after the import"
    )
    sub.add_parser("check", help=f"boot {IMAGE} with systemd and wait until it is running")
    args = parser.parse_args(argv)

    try:
        if args.command == "setup":
            setup(force=args.force)
        elif args.command == "build":
            build(force=args.force, keep_rootfs=args.keep_rootfs)
        elif args.command == "check":
            started = time.monotonic()
            state = check()
            say(f"{IMAGE}: systemd {state} after {time.monotonic() - started:.0f}s")
    except ImageError as exc:
        print(f"image: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
