"""collbench_save: write text to a file on the controller, inside the Ansible process.

The run directory lives on the controller. Writing a log or facts.json there with
`copy` and `delegate_to: localhost` costs two module runs (a checksum, then the copy), each a
new Python process, per host and per launch; this writes the file directly, private and whole
(collbench_py/rundir/private_files.py). manifest.json has its own action, collbench_manifest.

    - name: Keep what the launcher printed
      collbench_save:
        dest: "{{ run_dir }}/inter/all/launcher-node1.out"
        content: "{{ result.stdout }}"

Check mode writes nothing and says whether it would have changed the file.
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

from collbench_py.rundir.private_files import write_private  # noqa: E402


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("dest", "content"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        dest, content = self._task.args.get("dest"), self._task.args.get("content")
        if not isinstance(dest, str) or not dest or content is None:
            raise AnsibleActionFail("collbench_save needs `dest` (a path) and `content` (text)")
        path = Path(dest)
        data = str(content).encode("utf-8", "surrogateescape")
        result["dest"] = dest
        try:
            if self._task.check_mode:
                result["changed"] = not path.is_file() or path.read_bytes() != data
            else:
                result["changed"] = write_private(path, data)
        except OSError as exc:
            raise AnsibleActionFail(f"cannot write {dest}: {exc.strerror or exc}") from None
        return result
