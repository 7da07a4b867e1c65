"""collbench_manifest: (re)write the run's manifest.json on the controller from the playbook's state.

The rules (each host's status, the launches' order, the Slurm object) are collbench_py/rundir/manifest.py's;
this hands it the play's variables: every host's (hostvars), the hosts still in the play and the
inventory's group slurm_unusable.

    - name: Write manifest.json
      collbench_manifest:
        status: running                 # or complete (the report role, at the end)
      run_once: true

Returns `dest`, `changed` (false when the file already held exactly that), `hosts` (how many)
and `not_measured` ([[host, status], ...]: every host whose status is not ok), which the report
role's exit code is made of.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.rundir.manifest import MANIFEST_NAME, RUN_STATUSES, from_ansible, not_measured, write  # noqa: E402


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("status",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        status = self._task.args.get("status") or "running"
        if status not in RUN_STATUSES:
            raise AnsibleActionFail(f"collbench_manifest: status {status!r}, expected one of {RUN_STATUSES}")
        hostvars = task_vars["hostvars"]
        try:
            manifest = from_ansible(
                hostvars,
                play_hosts=list(task_vars.get("ansible_play_hosts") or ()),
                unusable_hosts=list((task_vars.get("groups") or {}).get("slurm_unusable") or ()),
                status=status,
            )
            run_dir = Path(str(hostvars["localhost"]["collbench_run"]["run_dir"]))
            changed = write(run_dir, manifest)
        except (KeyError, TypeError, ValueError) as error:
            raise AnsibleActionFail(f"cannot build the manifest: {error}") from None
        except OSError as error:
            raise AnsibleActionFail(f"cannot write the manifest: {error.strerror or error}") from None
        result.update(
            dest=str(run_dir / MANIFEST_NAME),
            changed=changed,
            hosts=len(manifest.hosts),
            not_measured=[list(pair) for pair in not_measured(manifest)],
        )
        return result
