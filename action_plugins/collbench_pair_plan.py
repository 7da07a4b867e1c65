"""collbench_pair_plan: before each round of pairs, on the controller, decide the round.

Records the busbw of the round just run, writes <run_dir>/inter/pairs/plan.json and returns the
next round's pairs, or done (collbench_py/pairs/controller.py holds the logic; this maps host names
between the inventory and the run directory, and turns errors into one message). The pair
launches measured so far are those the play's hosts recorded (collbench_launches), gathered as
the manifest gathers them (collbench_py/rundir/manifest.py); `launches` given explicitly replaces them.

    - name: Plan the next round of pairs
      collbench_pair_plan:
        run_dir: "{{ run.run_dir }}"
        seed: "{{ run.run_id }}"
        schedule: "{{ collbench_pairs }}"          # null: automatic on the host count
        collective: "{{ collbench_pairs_collective }}"
        collectives: "{{ run.parameters.collectives }}"
        k: 3
        localisation_rounds: 3
        hosts: "{{ ansible_play_hosts }}"          # inventory names in the run
        dir_names: "{{ run.dir_names }}"           # inventory name -> hosts/<name>/
        groups: {node1: leaf1, ...}                # inventory name -> rack / leaf / rail
        min_drop: 0.05                             # the least drop below the median that is slow
      run_once: true

Returns done, round, kind, pairs ([{hosts: [inventory names], dest, label}]), log (new lines),
rounds, max_rounds, schedule.
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

from collbench_py.pairs.controller import PairRunError, resolve_settings, step  # noqa: E402
from collbench_py.rundir.manifest import recorded_launches  # noqa: E402
from collbench_py.rundir.planfile import PlanFileError  # noqa: E402

_ARGS = (
    "run_dir",
    "seed",
    "schedule",
    "collective",
    "collectives",
    "k",
    "localisation_rounds",
    "hosts",
    "dir_names",
    "groups",
    "launches",
    "min_drop",
    "rails_sample",
    "rails_min_drop",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = {name: self._task.args.get(name) for name in _ARGS}
        dir_names = dict(args["dir_names"] or {})
        hosts = [str(h) for h in args["hosts"] or []]
        to_dir = {h: str(dir_names.get(h, h)) for h in hosts}
        to_inventory = {str(d): str(h) for h, d in dir_names.items()}
        groups = {to_dir[h]: g for h, g in dict(args["groups"] or {}).items() if h in to_dir}
        try:
            settings = resolve_settings(
                args["schedule"] or None,
                collective=args["collective"] or None,
                collectives=list(args["collectives"] or []),
                k=args["k"],
                localisation_rounds=args["localisation_rounds"],
                seed=str(args["seed"]),
                hosts=sorted(to_dir.values()),
                groups=groups,
                min_drop=0.05 if args["min_drop"] is None else args["min_drop"],
            )
            if settings is None:
                result.update(done=True, round=None, kind=None, pairs=[], log=[], rounds=0, schedule="none")
                return result
            launches = args["launches"]
            if launches is None:
                played = list(task_vars.get("ansible_play_hosts_all") or ())
                recorded = recorded_launches(task_vars["hostvars"], played)
                launches = [launch for launch in recorded if launch.get("kind") == "pair"]
            now = step(Path(str(args["run_dir"])), settings, list(launches))
        except (PairRunError, PlanFileError) as error:
            raise AnsibleActionFail(str(error)) from None
        except OSError as error:
            raise AnsibleActionFail(f"cannot write the pair plan: {error.strerror or error}") from None
        result.update(
            changed=bool(now.log),
            done=now.done,
            round=now.round,
            kind=now.kind,
            # A pair with a host that left the run since the plan began names a host no longer in
            # the play: it is not started (pair_round.yml).
            pairs=[
                {
                    "hosts": [to_inventory.get(h, h) for h in launch.pair],
                    "dest": launch.dest,
                    "label": launch.label,
                }
                for launch in now.launches
            ],
            log=list(now.log),
            rounds=now.rounds,
            max_rounds=now.max_rounds,
            schedule=now.plan.schedule,
        )
        return result
