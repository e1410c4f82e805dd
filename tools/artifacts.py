"""Build, on the controller, the install sources the Ansible roles take from the controller (air-gapped
style), for the Molecule scenarios and for operators without access to the upstream download hosts.

Everything lands under ``.cache/artifacts/`` (see docs/ansible.md):

=============  ==========================================================  =========================
target         what                                                        role variable
=============  ==========================================================  =========================
``kafka``      ``kafka/kafka_2.13-VERSION.tgz`` (+ ``.sha512``): the           ``kafka_archive_src``
               broker's jars from Maven Central in the release layout
               (``kafka_2.13-VERSION/libs/*.jar``)
``ferretdb``   ``ferretdb/ferretdb`` (+ ``.sha256``): FerretDB built from      ``mongodb_ferretdb_binary_src``
               its Go module, statically linked
``jmx``        ``jmx-exporter/jmx_prometheus_javaagent-VERSION.jar``: the     ``prometheus_jmx_exporter_``
               Prometheus JMX exporter javaagent from Maven Central, for   ``jar_src``
               Kafka's and ZooKeeper's JVMs
``wheels``     ``ams-wheelhouse.tar``: the ``ams-app`` wheel of this           ``ams_wheelhouse_src``
               checkout, the web console built into it first (``make
               console``: npm), and a wheel of every runtime dependency
               (requirements.txt), gathered in ``wheels/``
``upgrade``    ``ams-wheelhouse-upgrade.tar``: the same wheelhouse with the    ``ams_wheelhouse_src`` and
               project's wheel at ``VERSION+upgrade`` (version B of the        ``ams_version`` of the
               multi-host scenario's rolling upgrade)                          upgrade (molecule/multinode)
``spark``      ``spark/``: wheels of ``pyspark`` and ``py4j``                  ``spark_wheelhouse_src``
``spark-jobs`` ``spark-jobs/``: what the AMS Spark jobs need on the            ``spark_jobs_src``
               driver host: ``ams-spark-jobs.zip`` (the ``spark/``
               package, for ``--py-files``), ``ams_spark_job.py`` (the
               main file), ``jars/`` (the Kafka connector from Maven
               Central, minus what pyspark ships) and ``wheels/`` (the
               driver's pymongo, dnspython and confluent-kafka, pinned
               as in requirements.txt)
``tls``        ``tls/``: a throwaway CA and a certificate for 127.0.0.1 and    ``haproxy_tls_*_src``
               localhost (``ca.pem``, ``server.pem``, ``server.key``), for     (test inventory only)
               the test inventory's haproxy; ``multinode.pem`` /
               ``multinode.key``, the same CA's certificate for the
               multi-host scenario's haproxy (lb1) and the test host's
               bridge address (inventories/multinode); ``authn-ca.pem``
               / ``authn-ca.key``, a second throwaway CA that the
               scenario's ``ams authn`` trusts and its tests issue client
               certificates from (``ams_authn_ca_src``)
=============  ==========================================================  =========================

Each target is skipped while its output is up to date (``wheels`` always rebuilds the project's
own wheel, which is quick). The Kafka archive is reproducible: the same jars give the same bytes, so
its checksum only changes with the jars.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tools import cluster, console_build, pki, services, spark_cluster, toolkit

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / ".cache" / "artifacts"
KAFKA_DIR = ARTIFACTS / "kafka"
FERRETDB_DIR = ARTIFACTS / "ferretdb"
JMX_EXPORTER_DIR = ARTIFACTS / "jmx-exporter"
WHEELS_DIR = ARTIFACTS / "wheels"
WHEELHOUSE_TAR = ARTIFACTS / "ams-wheelhouse.tar"
UPGRADE_WHEELHOUSE_TAR = ARTIFACTS / "ams-wheelhouse-upgrade.tar"
#: The local version label of the upgrade wheel: VERSION+upgrade, a version above VERSION (PEP 440).
UPGRADE_LABEL = "upgrade"
SPARK_DIR = ARTIFACTS / "spark"
SPARK_JOBS_DIR = ARTIFACTS / "spark-jobs"
#: What the jobs' driver imports besides pyspark (spark/common.py), at the pins of requirements.txt.
SPARK_DRIVER_PACKAGES = ("pymongo", "dnspython", "confluent-kafka")
TLS_DIR = ARTIFACTS / "tls"

SCALA_VERSION = services.SCALA_VERSION
KAFKA_VERSION = services.KAFKA_VERSION
KAFKA_NAME = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}"
#: The pyspark release the spark role installs by default (spark_pyspark_version) and its py4j.
PYSPARK_VERSION = "3.5.9"
PY4J_VERSION = "0.10.9.9"
PIP_TIMEOUT = 1800.0
#: mtime of every member of the Kafka archive, so identical jars give an identical archive.
EPOCH = 0


class ArtifactError(RuntimeError):
    """An artifact could not be built; the message says why."""


def say(message: str) -> None:
    print(f"artifacts: {message}", file=sys.stderr, flush=True)


def _digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_checksum(path: Path, algorithm: str) -> str:
    value = _digest(path, algorithm)
    path.with_name(f"{path.name}.{algorithm}").write_text(value + "\n")
    return value


def kafka_archive_bytes(jars: Sequence[Path], name: str = KAFKA_NAME) -> bytes:
    """A gzipped tar of ``name/libs/<jar>`` for each jar, sorted, with fixed owners and times (pure)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in (name, f"{name}/libs"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tar.addfile(info)
        for jar in sorted(jars, key=lambda p: p.name):
            info = tarfile.TarInfo(f"{name}/libs/{jar.name}")
            info.size, info.mode, info.mtime = jar.stat().st_size, 0o644, EPOCH
            with jar.open("rb") as stream:
                tar.addfile(info, stream)
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=EPOCH, compresslevel=6) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def build_kafka() -> Path:
    services.install_kafka()
    jars = sorted(services.KAFKA_LIB.glob("*.jar"))
    if not jars:
        raise ArtifactError(f"no jars in {services.KAFKA_LIB}")
    archive = KAFKA_DIR / f"{KAFKA_NAME}.tgz"
    data = kafka_archive_bytes(jars)
    if archive.exists() and archive.read_bytes() == data and archive.with_name(f"{archive.name}.sha512").exists():
        say(f"{archive.relative_to(ROOT)} is up to date")
        return archive
    KAFKA_DIR.mkdir(parents=True, exist_ok=True)
    staging = archive.with_name(f"{archive.name}.tmp")
    staging.write_bytes(data)
    staging.rename(archive)
    _write_checksum(archive, "sha512")
    say(f"wrote {archive.relative_to(ROOT)} ({len(jars)} jars, {len(data) >> 20} MiB)")
    return archive


def build_ferretdb() -> Path:
    services.install_ferretdb()
    target = FERRETDB_DIR / "ferretdb"
    if target.exists() and _digest(target, "sha256") == _digest(services.FERRETDB_BIN, "sha256"):
        say(f"{target.relative_to(ROOT)} is up to date")
        return target
    FERRETDB_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy2(services.FERRETDB_BIN, target)
    target.chmod(0o755)
    _write_checksum(target, "sha256")
    (FERRETDB_DIR / "VERSION").write_text(services.FERRETDB_VERSION + "\n")
    say(f"wrote {target.relative_to(ROOT)} ({services.FERRETDB_VERSION})")
    return target


def build_jmx_exporter() -> Path:
    services.install_jmx_exporter()
    target = JMX_EXPORTER_DIR / services.JMX_EXPORTER_JAR.name
    if target.exists() and _digest(target, "sha256") == _digest(services.JMX_EXPORTER_JAR, "sha256"):
        say(f"{target.relative_to(ROOT)} is up to date")
        return target
    JMX_EXPORTER_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy2(services.JMX_EXPORTER_JAR, target)
    say(f"wrote {target.relative_to(ROOT)}")
    return target


def _pip(*args: str) -> None:
    toolkit.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        timeout=PIP_TIMEOUT,
        what=f"pip {args[0]}",
        error=ArtifactError,
        # a reproducible project wheel: zip entries dated 1980 instead of the build time
        env={**os.environ, "PIP_NO_INPUT": "1", "SOURCE_DATE_EPOCH": "315532800"},
        cwd=ROOT,
    )


def build_wheels() -> Path:
    # the wheel ships the built console (ams_app/console_dist): built first, or no wheel
    console_build.build(ArtifactError)
    WHEELS_DIR.mkdir(parents=True, exist_ok=True)
    for stale in WHEELS_DIR.glob("ams_app-*.whl"):
        stale.unlink()
    # the project's wheel without its dependencies, then the pinned ones and what they need
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(WHEELS_DIR), str(ROOT))
    _pip("wheel", "--quiet", "--wheel-dir", str(WHEELS_DIR), "-r", str(ROOT / "requirements.txt"))
    wheels = sorted(WHEELS_DIR.glob("*.whl"))
    # one file to copy instead of dozens (each copy is a round trip to the host)
    _replace_if_changed(WHEELHOUSE_TAR, wheelhouse_tar_bytes(wheels))
    say(f"{WHEELHOUSE_TAR.relative_to(ROOT)}: {len(wheels)} wheels")
    return WHEELHOUSE_TAR


def _replace_if_changed(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a staging file, unless it holds exactly that already."""
    if not (path.exists() and path.read_bytes() == data):
        staging = path.with_name(f"{path.name}.tmp")
        staging.write_bytes(data)
        staging.rename(path)


def upgrade_version(pyproject: str, label: str = UPGRADE_LABEL) -> tuple[str, str]:
    """``pyproject`` with ``[project] version`` given the local label ``+label``, and that version (pure)."""
    lines = pyproject.splitlines(keepends=True)
    section = ""
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        elif section == "[project]" and stripped.startswith("version") and "=" in stripped:
            version = stripped.split("=", 1)[1].strip().strip('"').split("+", 1)[0]
            lines[index] = f'version = "{version}+{label}"\n'
            return "".join(lines), f"{version}+{label}"
    raise ArtifactError("pyproject.toml has no [project] version")


def build_upgrade_wheels() -> Path:
    """The wheelhouse of ``wheels`` with the project's wheel rebuilt as ``VERSION+upgrade``."""
    build_wheels()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        for name in ("ams_app", "spark"):
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(ROOT / "README.md", source / "README.md")
        pyproject, version = upgrade_version((ROOT / "pyproject.toml").read_text())
        (source / "pyproject.toml").write_text(pyproject)
        out = Path(tmp) / "wheel"
        _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source))
        ours = sorted(out.glob("ams_app-*.whl"))
        if len(ours) != 1:
            raise ArtifactError(f"expected one ams_app wheel, built {[p.name for p in ours]}")
        deps = [p for p in sorted(WHEELS_DIR.glob("*.whl")) if not p.name.startswith("ams_app-")]
        data = wheelhouse_tar_bytes([*deps, ours[0]])
    _replace_if_changed(UPGRADE_WHEELHOUSE_TAR, data)
    say(f"{UPGRADE_WHEELHOUSE_TAR.relative_to(ROOT)}: ams_app {version} and {len(deps)} dependencies")
    return UPGRADE_WHEELHOUSE_TAR


def wheelhouse_tar_bytes(wheels: Sequence[Path]) -> bytes:
    """An uncompressed tar of the wheels (wheels are zips already), sorted, fixed owners and times (pure)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in sorted(wheels, key=lambda p: p.name):
            info = tarfile.TarInfo(wheel.name)
            info.size, info.mode, info.mtime = wheel.stat().st_size, 0o644, EPOCH
            with wheel.open("rb") as stream:
                tar.addfile(info, stream)
    return raw.getvalue()


def build_spark() -> Path:
    wanted = {"pyspark": PYSPARK_VERSION, "py4j": PY4J_VERSION}
    present = {name for name, version in wanted.items() if any(SPARK_DIR.glob(f"{name}-{version}-*.whl"))}
    if present == set(wanted):
        say(f"{SPARK_DIR.relative_to(ROOT)} is up to date")
        return SPARK_DIR
    SPARK_DIR.mkdir(parents=True, exist_ok=True)
    say(f"building the pyspark {PYSPARK_VERSION} wheel (a 300 MiB sdist: a few minutes the first time)")
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(SPARK_DIR), *(f"{n}=={v}" for n, v in wanted.items()))
    return SPARK_DIR


def pinned(requirements: str, names: Sequence[str]) -> list[str]:
    """The ``name==version`` lines of ``requirements`` for ``names`` (pure); each must be pinned there."""
    pins = {}
    for line in requirements.splitlines():
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            pins[name.strip().lower()] = f"{name.strip()}=={version.strip()}"
    missing = [n for n in names if n.lower() not in pins]
    if missing:
        raise ArtifactError(f"not pinned in requirements.txt: {', '.join(missing)}")
    return [pins[n.lower()] for n in names]


def build_spark_jobs() -> Path:
    SPARK_JOBS_DIR.mkdir(parents=True, exist_ok=True)
    try:
        jars = spark_cluster.install_jars()
    except spark_cluster.SparkError as exc:
        raise ArtifactError(str(exc)) from exc
    jars_dir = SPARK_JOBS_DIR / "jars"
    fresh = jars_dir.with_name("jars.tmp")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    for jar in jars:
        shutil.copy2(jar, fresh / jar.name)
    shutil.rmtree(jars_dir, ignore_errors=True)
    fresh.rename(jars_dir)
    if spark_cluster.build_py_files(target=SPARK_JOBS_DIR / "ams-spark-jobs.zip") is None:
        raise ArtifactError(f"no spark package in {spark_cluster.PACKAGE_DIR}")
    main = SPARK_JOBS_DIR / "ams_spark_job.py"
    source = (spark_cluster.PACKAGE_DIR / "__main__.py").read_bytes()
    if not (main.exists() and main.read_bytes() == source):
        main.write_bytes(source)
    specs = pinned((ROOT / "requirements.txt").read_text(), SPARK_DRIVER_PACKAGES)
    wheels = SPARK_JOBS_DIR / "wheels"
    fresh = wheels.with_name("wheels.tmp")  # only the pinned releases: no stale wheel for pip to prefer
    shutil.rmtree(fresh, ignore_errors=True)
    _pip("wheel", "--quiet", "--wheel-dir", str(fresh), *specs)
    shutil.rmtree(wheels, ignore_errors=True)
    fresh.rename(wheels)
    say(f"{SPARK_JOBS_DIR.relative_to(ROOT)}: {len(jars)} jars, the jobs' zip and main, wheels of {' '.join(specs)}")
    return SPARK_JOBS_DIR


#: The multi-host scenario's names and addresses its haproxy certificate covers (inventories/multinode):
#: the haproxy host and the test host's end of the bridge, where the tests' push receiver listens.
MULTINODE_SANS = ("DNS:lb1", "IP:172.31.213.10", "IP:172.31.213.1")


def build_tls() -> Path:
    files = cluster.make_tls(TLS_DIR)
    say(f"{TLS_DIR.relative_to(ROOT)}: a test CA ({files.ca.name}) and a certificate for 127.0.0.1 and localhost")
    issue_certificate(TLS_DIR, "multinode", MULTINODE_SANS)
    if not (TLS_DIR / "authn-ca.pem").exists() or not (TLS_DIR / "authn-ca.key").exists():
        pki.new_ca("AMS multinode AuthN test CA").write(TLS_DIR, "authn-ca")
        (TLS_DIR / "authn-ca.key").chmod(0o600)
        say(f"{TLS_DIR.relative_to(ROOT)}: authn-ca.pem, the CA of the multi-host scenario's client certificates")
    return TLS_DIR


def issue_certificate(directory: Path, name: str, sans: Sequence[str], days: int = 3650) -> Path:
    """``name.pem`` / ``name.key``: a server certificate for ``sans`` from the CA in ``directory``
    (kept while it still names exactly ``sans``)."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    wanted = ",".join(sans)
    marker = directory / f"{name}.sans"
    if cert.exists() and key.exists() and marker.exists() and marker.read_text().strip() == wanted:
        return cert
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ArtifactError("openssl not found (apt-get install openssl)")
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        t = Path(tmp)
        (t / "ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName={wanted}\n"
        )
        common_name = sans[0].split(":", 1)[1]
        toolkit.run(
            [openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", "k", "-out", "csr",
             "-subj", f"/CN={common_name}"],
            timeout=60, what="openssl req", error=ArtifactError, cwd=t,
        )  # fmt: skip
        toolkit.run(
            [openssl, "x509", "-req", "-in", "csr", "-CA", str(directory / "ca.pem"), "-CAkey",
             str(directory / "ca.key"), "-set_serial", f"0x{os.urandom(16).hex()}", "-sha256", "-days", str(days),
             "-extfile", "ext", "-out", "c"],
            timeout=60, what="openssl x509", error=ArtifactError, cwd=t,
        )  # fmt: skip
        (t / "k").chmod(0o600)
        os.replace(t / "k", key)
        os.replace(t / "c", cert)
    marker.write_text(wanted + "\n")
    say(f"{cert.relative_to(ROOT)}: a certificate for {wanted}")
    return cert


TARGETS: dict[str, Callable[[], Path]] = {
    "kafka": build_kafka,
    "ferretdb": build_ferretdb,
    "jmx": build_jmx_exporter,
    "wheels": build_wheels,
    "upgrade": build_upgrade_wheels,
    "spark": build_spark,
    "spark-jobs": build_spark_jobs,
    "tls": build_tls,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="artifacts.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("targets", nargs="*", choices=[*TARGETS, "all"], default=["all"], metavar="TARGET")
    args = parser.parse_args(argv)
    names = list(TARGETS) if "all" in args.targets else list(dict.fromkeys(args.targets))
    try:
        for name in names:
            TARGETS[name]()
    except (ArtifactError, services.ServiceError, spark_cluster.SparkError) as exc:
        print(f"artifacts: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
