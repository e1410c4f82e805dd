# The test hosts' transport (inventories/test, inventories/multinode): containers.podman's podman
# connection with Ansible's pipelining. Each `podman exec` costs about 0.3 s here, and the collection's
# plugin spends five of them on every task (home, mkdir, chmod, run, rm); piping the module to the
# interpreter's stdin (`podman exec --interactive`) makes most tasks one. Files (copy, template) still
# go through the container's mounted root, as the collection's plugin does. See docs/ansible.md.
from __future__ import annotations

import shlex

from ansible import constants as C
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
    name: podman_pipelined
    short_description: Run tasks in an existing podman container, modules piped to stdin
    description:
      - The containers.podman.podman connection with pipelining; the same options.
    options:
      remote_addr:
        description: The name or ID of the container.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: The user that runs the commands inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments to the podman command line.
        default: ''
        ini:
          - section: defaults
            key: podman_extra_args
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description: The podman executable.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
"""


class Connection(PodmanConnection):  # type: ignore[misc]  # Ansible has no type hints
    transport = "podman_pipelined"
    has_pipelining = True

    def is_pipelining_enabled(self, wrap_async: bool = False) -> bool:
        # the collection's plugin has no pipelining option to read; this one always pipelines, except
        # where Ansible itself cannot (async tasks, kept remote files, a become method that refuses)
        if self.become and not self.become.pipelining:
            return False
        return not C.DEFAULT_KEEP_REMOTE_FILES and not wrap_async

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> tuple[int, bytes, bytes]:
        if in_data is None:
            result: tuple[int, bytes, bytes] = super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
            return result
        if not self._connected:
            self._connect()
        # podman exec passes its stdin to the command only with --interactive
        args = ["exec", "--interactive"]
        if self.user:
            args += ["--user", self.user]
        result = self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
        return result
