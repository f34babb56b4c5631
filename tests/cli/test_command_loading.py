"""The console script loads only the module of the command it runs; the table it goes by matches the app."""

from __future__ import annotations

import json
import subprocess
import sys

import fuseplan.cli as cli
from fuseplan.cli.common import app


def test_every_command_is_found_in_the_module_the_table_names():
    cli.load_commands()
    registered = {(info.name or info.callback.__name__).replace("_", "-"): info.callback.__module__
                  for info in app.registered_commands}
    registered |= {info.name: next(iter(info.typer_instance.registered_commands)).callback.__module__
                   for info in app.registered_groups}
    assert {name: module.rsplit(".", 1)[1] for name, module in registered.items()} == cli.COMMAND_MODULE
    assert set(cli.COMMAND_MODULE.values()) == set(cli.COMMAND_MODULES)


def _loaded_after(args: list[str], tmp_path) -> list[str]:
    script = ("import json, sys\nfrom fuseplan.cli.entry import run\n"
              f"status = run({args!r}, only_needed=True)\n"
              "print(json.dumps([status, sorted(m for m in sys.modules if m.startswith('fuseplan.'))]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True)
    status, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 0, done.stderr
    return modules


def test_plan_runs_without_loading_the_rewrite_and_sweep_stages(tmp_path):
    modules = _loaded_after(["plan", "squeezenet", "--buffer", "256KB", "-o", "plan.json"], tmp_path)
    assert "fuseplan.cli.plan" in modules and "fuseplan.search.auto" in modules
    assert (tmp_path / "plan.json").exists()
    for stage in ("fuseplan.cli.rewrite", "fuseplan.rewrite.objectives", "fuseplan.sweep", "fuseplan.cli.sweep",
                  "fuseplan.passes.pass_search"):
        assert stage not in modules


def test_help_lists_every_command(tmp_path):
    script = ("from fuseplan.cli.entry import run\n"
              "raise SystemExit(run(['--help'], only_needed=True))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={"COLUMNS": "200", **__import__("os").environ})
    assert done.returncode == 0
    for name in cli.COMMAND_MODULE:
        assert f" {name} " in done.stdout


def test_the_rewrite_package_exports_what_it_lists():
    import fuseplan.rewrite as rewrite

    assert sorted(rewrite.__all__) == sorted(rewrite._EXPORTS)
    for name in rewrite.__all__:
        assert getattr(rewrite, name) is not None
