"""The experiment config: validation, matrix expansion and per-run resolution (one home for each)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainer import settings
from trainer.contract.config import ConfigError
from trainer.contract.peak import PEAK_WINDOW_KEY, SMOOTHING_WINDOW
from trainer.contract.runid import RunId
from trainer.sweep.duplicates import duplicate_run_problems
from trainer.sweep.variants import deep_merge, variant_delta, variant_problems, variant_runs

if TYPE_CHECKING:  # imported by validate_config alone: resolving and reading a run's config needs no
    import jsonschema  # jsonschema (the GPU device check's image lacks it)

DEFAULT_DTYPE = settings.default_of(settings.ModelSettings, "dtype")  # a scale without `dtype`


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML file into a dict, naming the file on a syntax error."""
    try:
        with open(path) as f:
            return yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def validate_config(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Check `config` against the JSON schema and the cross-references the schema cannot express.

    Raises ConfigError naming every offending key, e.g. `training.learning_rat: unknown key`.
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    coerce_command_line_strings(config, validator)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = []
        for e in errors:
            if e.validator == "additionalProperties":
                allowed = sorted(e.schema.get("properties", {}))
                extra = sorted(set(e.instance) - set(allowed))
                for key in extra:
                    where = f"{_key_path(e)}.{key}" if e.absolute_path else key
                    hint = f" (allowed here: {', '.join(allowed)})" if allowed else ""
                    lines.append(f"{where}: unknown key{hint}")
            elif e.validator == "propertyNames":
                lines.append(f"{_key_path(e)}: unknown name {e.instance!r}: {e.message}")
            elif "propertyNames" in e.schema_path and e.validator == "enum":  # a field another source type takes
                where = f"{_key_path(e)}.{e.instance}" if e.absolute_path else e.instance
                lines.append(f"{where}: not a field of this source type (its fields: {', '.join(e.validator_value)})")
            else:
                lines.append(f"{_key_path(e)}: {e.message}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(dict.fromkeys(lines)))
    _check_references(config)


def coerce_command_line_strings(config: dict[str, Any], validator: jsonschema.protocols.Validator) -> None:
    """Turn strings where the schema wants numbers, booleans or null into those, in place.

    Snakemake parses nested `--config` values with YAML's BaseLoader, so `seeds=[0,1]` arrives as
    ['0', '1']; a string is re-read as YAML only where a string is not allowed.
    """
    for _ in range(1000):  # each pass fixes at least one value; bounded all the same
        fixed = False
        for e in validator.iter_errors(config):
            if e.validator not in ("type", "oneOf") or not isinstance(e.instance, str) or not e.absolute_path:
                continue
            try:
                value = yaml.safe_load(e.instance)
            except yaml.YAMLError:
                continue
            if isinstance(value, str) or not _fits(validator, e, value):
                continue
            parent = config
            for key in list(e.absolute_path)[:-1]:
                parent = parent[key]
            parent[e.absolute_path[-1]] = value
            fixed = True
            break
        if not fixed:
            return


def _fits(validator: jsonschema.protocols.Validator, error: jsonschema.ValidationError, value: Any) -> bool:
    """Whether `value` satisfies the schema `error` was raised by (a `type`, or a `oneOf` such as an int or `all`)."""
    if error.validator == "type":
        allowed = [error.validator_value] if isinstance(error.validator_value, str) else error.validator_value
        return any(validator.is_type(value, t) for t in allowed)
    return validator.evolve(schema=error.schema).is_valid(value)


def _check_references(config: dict[str, Any]) -> None:
    problems = []
    if config["matrix"] not in config["matrices"]:
        problems.append(f"matrix: {config['matrix']!r} is not one of matrices: {sorted(config['matrices'])}")
    for name, m in config["matrices"].items():
        for scale in m["scales"]:
            if scale not in config["scales"]:
                problems.append(f"matrices.{name}.scales: unknown scale {scale!r} (scales: {sorted(config['scales'])})")
        for axis, section in (("workflows", "workflows"), ("tasks", "tasks")):
            for value in m[axis]:
                if value not in config[section]:
                    problems.append(f"matrices.{name}.{axis}: {value!r} has no entry in `{section}`")
        if m.get("single_baseline") and "single" not in config["workflows"]:
            problems.append(f"matrices.{name}.single_baseline: needs a `workflows.single` entry")
    problems += _workflow_problems(config)
    problems += variant_problems(config)
    launcher = config.get("launcher", {})
    if launcher.get("array_window_s") is not None and launcher.get("backend", "local") != "slurm":
        problems.append(
            f"launcher.array_window_s: job arrays are SLURM submissions, and launcher.backend is "
            f"{launcher.get('backend', 'local')!r}: remove it, or run with --profile slurm"
        )
    resolved = resolve_matrix(config) if not problems else {}
    runs = {str(r) for r in resolved}
    if not problems and not runs:
        problems.append(
            f"matrices.{config['matrix']}: a matrix of 0 runs (give workflows and policies, or single_baseline: true)"
        )
    if not problems:
        cells = run_cells(resolved)
        problems += _policy_group_problems(cells) + _run_settings_problems(config, cells)
        problems += duplicate_run_problems(resolved, config["matrix"])
    for name in restart_selection(config):
        if name != "all" and runs and name not in runs:
            problems.append(f"restart: {name!r} is not a run of matrix {config['matrix']!r} (a run id, or `all`)")
    for i, o in enumerate(config.get("overrides", [])):
        scale = o["match"].get("scale")
        if scale is not None and scale not in config["scales"]:
            problems.append(f"overrides[{i}].match.scale: unknown scale {scale!r}")
        for key, names in (("match.workflow", [o["match"].get("workflow")]), ("workflows", o.get("workflows", {}))):
            for name in names:
                if name is not None and name not in config["workflows"]:
                    problems.append(f"overrides[{i}].{key}: {name!r} has no entry in `workflows`")
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


def _policy_group_problems(cells: list[tuple[dict[str, Any], list[RunId]]]) -> list[str]:
    """Each run's training.policy_groups, where set, must route every role of its workflow once."""
    from trainer.workflows import workflow_class  # the roles live with the workflows

    problems = []
    for run_config, (run, *_) in cells:
        groups = run_config["training"].get("policy_groups")
        if not groups:
            continue
        roles = workflow_class(run.workflow, run_config["workflow_params"]).roles
        listed = [r for members in groups.values() for r in members]
        missing = [r for r in roles if r not in listed]
        unknown = [r for r in listed if r not in roles]
        twice = sorted({r for r in listed if listed.count(r) > 1})
        if missing or unknown or twice:
            problems.append(
                f"training.policy_groups: {groups} must name every role of workflow "
                f"{run.workflow!r} ({', '.join(roles)}) once; missing {missing}, unknown {unknown}, "
                f"twice {twice}"
            )
    return list(dict.fromkeys(problems))


def _run_settings_problems(config: dict[str, Any], cells: list[tuple[dict[str, Any], list[RunId]]]) -> list[str]:
    """The checks across keys of trainer.settings (e.g. eval_samples > 1 needs sampling) on each cell's
    resolved training and task settings, each message once with the runs it concerns; and every task entry
    of `tasks` and of the overrides on its own (e.g. eval_problems on a train source), before any job."""
    runs_of: dict[str, list[str]] = {}
    for run_config, runs in cells:
        try:
            settings.from_dict(settings.TrainingSettings, run_config["training"], "training")
            settings.task_settings(run_config["task_params"], f"tasks.{runs[0].task}")
        except settings.SettingsError as e:
            runs_of.setdefault(str(e), []).extend(map(str, runs))
    problems = [f"{message} (runs: {', '.join(runs)})" for message, runs in runs_of.items()]
    sections = [("tasks", config["tasks"])] + [
        (f"overrides[{i}].tasks", o.get("tasks") or {}) for i, o in enumerate(config.get("overrides", []))
    ]
    for where, tasks in sections:  # every task entry, whether a run of this matrix reads it or not
        for name, task in tasks.items():
            try:
                settings.task_settings(task, f"{where}.{name}")
            except settings.SettingsError as e:
                problems.append(str(e))
    return problems


def _workflow_problems(config: dict[str, Any]) -> list[str]:
    """Each `workflows` key must name a registered workflow (importing its `module`, where given, registers it)."""
    from trainer.workflows import workflow_class  # lazily: only validation needs the workflows' registry

    problems = []
    for name, params in config["workflows"].items():
        try:
            workflow_class(name, params)
        except ValueError as e:
            problems.append(str(e) if str(e).startswith(f"workflows.{name}") else f"workflows.{name}: {e}")
    return problems


def restart_selection(config: dict[str, Any]) -> list[str]:
    """The `restart` entries as a list (a single id or `all` given on the command line is a string)."""
    value = config.get("restart")
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def restart_requested(config: dict[str, Any], run: RunId | str) -> bool:
    """Whether the user asked (`restart`) to start `run` afresh where it cannot resume."""
    selected = restart_selection(config)
    return "all" in selected or str(run) in selected


def load_config(path: str | Path, schema_path: str | Path) -> dict[str, Any]:
    """Load and validate a config file."""
    config = load_yaml(path)
    validate_config(config, load_yaml(schema_path))
    return config


def expand_matrix(config: dict[str, Any], name: str | None = None) -> list[RunId]:
    """All runs of a matrix (default: the one in use), each once, in a stable order: the plain runs, then
    each variant's (trainer.sweep.variants)."""
    name = name or config["matrix"]
    m = config["matrices"][name]
    seeds = config.get("seeds") or m["seeds"]
    runs = [
        RunId(w, t, s, p, seed)
        for w in m["workflows"]
        for t in m["tasks"]
        for s in m["scales"]
        for p in m["policies"]
        for seed in seeds
    ]
    if m.get("single_baseline", False):
        runs += [RunId("single", t, s, "shared", seed) for t in m["tasks"] for s in m["scales"] for seed in seeds]
    runs = list(dict.fromkeys(runs))
    return runs + variant_runs(config, name, runs)


def _matches(match: dict[str, str], run: RunId) -> bool:
    axes = run.axes()
    return all(axes[k] == v for k, v in match.items())


def resolve_run_config(config: dict[str, Any], run: RunId) -> dict[str, Any]:
    """Everything one run needs, with overrides and its variant's delta applied: what the trainer reads from
    config.json (`variant` in it only where the run has one)."""
    scale = config["scales"][run.scale]
    workflows = copy.deepcopy(config["workflows"])
    tasks = copy.deepcopy(config["tasks"])
    training = copy.deepcopy(config["training"])
    resources = copy.deepcopy(scale["resources"])
    for o in config.get("overrides", []):
        if not _matches(o["match"], run):
            continue
        training.update(copy.deepcopy(o.get("training", {})))
        resources.update(copy.deepcopy(o.get("resources", {})))
        for name, entry in o.get("workflows", {}).items():
            workflows.setdefault(name, {}).update(copy.deepcopy(entry))
        for name, entry in o.get("tasks", {}).items():
            tasks.setdefault(name, {}).update(copy.deepcopy(entry))
    if run.variant:  # the variant's delta, deep-merged after the overrides
        delta = variant_delta(config, run.variant)
        workflows, tasks, training, resources = (
            deep_merge(section, delta.get(name, {}))
            for name, section in (
                ("workflows", workflows),
                ("tasks", tasks),
                ("training", training),
                ("resources", resources),
            )
        )
    task = tasks[run.task]
    if training.get("max_completion_length") is None:
        training["max_completion_length"] = task.get(
            "max_completion_length", settings.default_of(settings.TaskSettings, "max_completion_length")
        )
    return {
        "run": str(run),
        **run.axes(),
        "model": {
            "name": scale["model"],
            "dtype": scale.get("dtype", DEFAULT_DTYPE),
            "tiny": scale.get("tiny"),
            **({"revision": scale["revision"]} if scale.get("revision") else {}),
        },  # pinned in config.yaml
        "workflow_params": workflows.get(run.workflow, {}),
        "task_params": task,
        "training": training,
        "resources": resources,
        "launcher": copy.deepcopy(config["launcher"]),
        "tracking": copy.deepcopy(config.get("tracking") or {"backend": "none"}),  # not hashed: where logs are mirrored
        **_peak_window(config),
    }


def resolve_matrix(config: dict[str, Any], runs: list[RunId] | None = None) -> dict[RunId, dict[str, Any]]:
    """Every run of the matrix in use (or of `runs`) with its resolved config, each cell resolved once.

    The runs of a cell differ in their seed alone, so they share the sections of one resolution: read
    them, never modify them (resolve_run_config gives one run a copy of its own)."""
    by_cell: dict[str, dict[str, Any]] = {}
    resolved = {}
    for run in expand_matrix(config) if runs is None else runs:
        core = by_cell.get(run.cell)
        if core is None:
            core = by_cell[run.cell] = resolve_run_config(config, run)
        resolved[run] = {**core, "run": str(run), **run.axes()}
    return resolved


def run_cells(resolved: dict[RunId, dict[str, Any]]) -> list[tuple[dict[str, Any], list[RunId]]]:
    """The runs grouped by cell (runs that differ in their seed alone), in order, each group with its first
    run's config: what a check of settings that no seed changes looks at once per cell."""
    cells: dict[str, tuple[dict[str, Any], list[RunId]]] = {}
    for run, run_config in resolved.items():
        cells.setdefault(run.cell, (run_config, []))[1].append(run)
    return list(cells.values())


def _peak_window(config: dict[str, Any]) -> dict[str, int]:
    """The smoothing of the peak the trainer keeps: analysis.smoothing_window, the analysis' own, so that the
    kept peak is the one the analysis reports. Recorded (unhashed) only where it is not the default, so that
    the config.json of runs made before the trainer kept a peak is unchanged."""
    window = (config.get("analysis") or {}).get("smoothing_window", SMOOTHING_WINDOW)
    return {} if window == SMOOTHING_WINDOW else {PEAK_WINDOW_KEY: window}


def base_model_spec(config: dict[str, Any], scale: str, tasks: list[str]) -> dict[str, Any]:
    """What the base_model step of one scale needs: the model entry and, for `tiny`, the tasks to warm up on."""
    entry = config["scales"][scale]
    spec = {
        "scale": scale,
        "model": entry["model"],
        "dtype": entry.get("dtype", DEFAULT_DTYPE),
        "tiny": entry.get("tiny"),
        "tasks": {},
    }
    if entry["model"] == "tiny":
        for task in tasks:
            rc = resolve_run_config(config, RunId("single", task, scale, "shared", 0))
            spec["tasks"][task] = {
                "task_params": rc["task_params"],
                "workflows": {
                    w: resolve_run_config(config, RunId(w, task, scale, "shared", 0))["workflow_params"]
                    for w in config["workflows"]
                },
            }
    return spec
