"""The tests' PKI: tools/pki.py, which tools/authn_demo.py uses too."""

from __future__ import annotations

from tests.helpers import load_tool

_pki = load_tool("pki")

Issued = _pki.Issued
Subject = _pki.Subject
now = _pki.now
name = _pki.name
new_ca = _pki.new_ca
server_cert = _pki.server_cert
client_cert = _pki.client_cert
crl = _pki.crl
subject_hash = _pki.subject_hash
write_bundle = _pki.write_bundle
write_igtf_dir = _pki.write_igtf_dir
