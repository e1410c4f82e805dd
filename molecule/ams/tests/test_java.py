"""Testinfra checks of the java role in the appliance (molecule/ams): the JRE that ZooKeeper and Kafka run on."""

from __future__ import annotations

import re

PACKAGE = "openjdk-17-jre-headless"
MIN_VERSION = 17


def test_package_is_installed(host):
    assert host.package(PACKAGE).is_installed


def test_java_runs_and_is_recent_enough(host):
    # java -version writes to stderr
    result = host.run("java -version")
    assert result.rc == 0, result.stderr
    match = re.search(r'version "(?:1\.)?(\d+)', result.stderr)
    assert match, result.stderr
    assert int(match.group(1)) >= MIN_VERSION


def test_java_is_on_the_default_path(host):
    java = host.file("/usr/bin/java")
    assert java.is_symlink
    assert host.file(java.linked_to).is_file
