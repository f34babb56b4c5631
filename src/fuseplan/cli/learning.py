"""``fuseplan dataset``, ``classifier`` and ``figure``: the validity GNN, its data and explainers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fuseplan import zoo
from fuseplan.cli.common import (app, stdout, Scheme, BytesPerElementOpt, JsonOpt, print_table, load_model,
                                 progress_bar, warn)
from fuseplan.documents import dumps_json
from fuseplan.errors import FuseplanError, shown
from fuseplan.files import check_output_dir, check_outputs


dataset_app = typer.Typer(help="Build the fusion-group dataset the validity GNN learns from.", no_args_is_help=True)
classifier_app = typer.Typer(help="Train and evaluate the validity GNN (needs the gnn extra).", no_args_is_help=True)
figure_app = typer.Typer(help="Draw figures.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")
app.add_typer(classifier_app, name="classifier")
app.add_typer(figure_app, name="figure")

DatasetOpt = Annotated[Path, typer.Option("--dataset", help="A directory written by `fuseplan dataset build`.")]


def _refuse_non_empty(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise FuseplanError(f"{directory} exists and is not an empty directory; choose a new one")


@dataset_app.command("build")
def dataset_build(
    output: Annotated[Path, typer.Option("--output", "-o", help="New directory to write the dataset to.")],
    models: Annotated[Optional[list[str]], typer.Option(
        "--models", help="Zoo names or ONNX files (repeatable); default: the whole zoo.")] = None,
    schemes: Annotated[Optional[list[Scheme]], typer.Option("--schemes", help="Schemes to label (repeatable).")] = None,
    groups: Annotated[Optional[int], typer.Option(
        "--groups", min=1, help="Groups per model (default: the reference paper's Table I counts).")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Random seed; the same seed gives the same dataset.")] = 0,
    bytes_per_element: BytesPerElementOpt = 1,
) -> None:
    """Sample fusion groups by random search and label them at 128KB to 2048KB."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.explain.dataset import build_dataset

    _refuse_non_empty(output)
    check_output_dir(output, "dataset directory")
    names = models or zoo.names()
    chosen = [s.value for s in schemes] if schemes else ["lbdf", "brr"]
    # Without --groups, zoo models get the reference paper's counts and other models 1000 groups.
    counts = {Path(m).stem if m.endswith(".onnx") else m: groups for m in names} if groups else None
    with progress_bar(TextColumn("sampling groups"), BarColumn(), MofNCompleteColumn()) as progress:
        task = progress.add_task("sampling groups", total=len(names) * len(chosen))
        meta = build_dataset(names, chosen, output, seed=seed, counts=counts, bytes_per_element=bytes_per_element,
                             progress=lambda name: progress.advance(task))
    for scheme, info in meta["schemes"].items():
        table = Table(title=f"{scheme.upper()}: {info['groups']} groups, {info['samples']} samples")
        table.add_column("model")
        table.add_column("groups", justify="right")
        for kb in meta["buffers_kb"]:
            table.add_column(f"valid @{kb}KB", justify="right")
        for model, count in info["groups_per_model"].items():
            share = info["valid_share"][model]
            table.add_row(model, str(count), *(f"{100 * share[kb]:.1f}%" for kb in meta["buffers_kb"]))
        print_table(table)
        _warn_short_samples(info["groups_per_model"], meta["groups_requested"], scheme)
    stdout.print(f"dataset written to {output}", highlight=False)


def _warn_short_samples(got: dict[str, int], asked: dict[str, int], scheme: str) -> None:
    """Say when a model has fewer distinct groups than were asked for (small networks run out)."""
    for model, count in got.items():
        if count < asked.get(model, 0):
            warn(f"{model} has only {count} distinct {scheme.upper()} groups of the {asked[model]} asked for")


@figure_app.command("valid-share")
def figure_valid_share(
    dataset: DatasetOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file to write.")] = Path("valid-share.png"),
) -> None:
    """Share of valid groups against buffer size, one curve per network, one panel per scheme."""
    from fuseplan.explain.dataset import load_dataset
    from fuseplan.report.figures import plot_valid_share

    check_outputs([("figure", output)], [dataset / "meta.json"])
    meta_path = dataset / "meta.json"
    schemes = []
    meta: dict = {}
    for scheme in ("lbdf", "brr"):
        try:
            _, meta = load_dataset(dataset, scheme)
            schemes.append(scheme)
        except FuseplanError:
            if not meta_path.exists():
                raise
    if not schemes:
        load_dataset(dataset, "lbdf")  # raises the precise reason
    meta["schemes"] = {s: meta["schemes"][s] for s in schemes}
    plot_valid_share(meta, output)
    stdout.print(f"figure written to {output}", highlight=False)


@classifier_app.command("train")
def classifier_train(
    dataset: DatasetOpt,
    scheme: Annotated[Scheme, typer.Option(help="Which scheme's labels to learn.")] = Scheme.lbdf,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs.")] = 50,
    seed: Annotated[int, typer.Option(min=0, help="Seed for the split, initialisation and batching.")] = 0,
    output: Annotated[Path, typer.Option("--output", "-o", help="Weights file to write.")] = Path("gnn.pt"),
    holdout_family: Annotated[Optional[str], typer.Option(
        "--holdout-family", help="Train without this network family and test on it (vgg, squeezenet, mobilenet, "
                                 "resnet, efficientnet, deeplab).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Train the 4-layer GraphConv validity classifier (80/10/10 split of groups)."""
    from dataclasses import asdict

    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.explain import gnn
    from fuseplan.explain.dataset import load_dataset

    gnn.require_torch()
    check_outputs([("weights", output)], [dataset / f"{scheme.value}.npz", dataset / "meta.json"])
    data, _ = load_dataset(dataset, scheme.value)
    splits = {}
    if holdout_family is not None:
        splits = gnn.family_split(data, holdout_family, seed)
    progress = progress_bar(TextColumn(f"training {scheme.value}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("loss {task.fields[loss]} val {task.fields[val]}"), quiet=as_json)
    with progress:
        task = progress.add_task("epochs", total=epochs, loss="-", val="-")
        model, report = gnn.train(
            data, epochs=epochs, seed=seed, **splits,
            on_epoch=lambda e, loss, val: progress.update(task, completed=e, loss=f"{loss:.4f}", val=f"{val:.4f}"),
        )
    info = {"epochs": epochs, "seed": seed, "holdout_family": holdout_family,
            "test_accuracy": report.test.accuracy, "test_f1": report.test.f1}
    gnn.save_weights(model, scheme.value, output, info)
    if as_json:
        print(dumps_json({**asdict(report), "holdout_family": holdout_family, "weights": str(output)}, indent=2))
        return
    stdout.print(
        f"{scheme.value.upper()} classifier: {report.train_samples} training samples, {epochs} epochs, "
        f"{report.seconds:.0f} s\n"
        f"test ({'family ' + holdout_family if holdout_family else '10% of groups'}): "
        f"accuracy {100 * report.test.accuracy:.2f}%, F1 {100 * report.test.f1:.2f}% "
        f"on {report.test.samples} samples\n"
        f"weights written to {output}", highlight=False)


@classifier_app.command("train-explainers")
def classifier_train_explainers(
    dataset: DatasetOpt,
    scheme: Annotated[Scheme, typer.Option(help="Which scheme's classifier to explain.")] = Scheme.lbdf,
    weights: Annotated[Optional[Path], typer.Option(help="Classifier weights (default: the shipped ones).")] = None,
    output_dir: Annotated[Path, typer.Option(
        "--output-dir", help="Where pg-<scheme>.pt and rg-<scheme>.pt go.")] = Path("."),
    pg_epochs: Annotated[int, typer.Option(min=1, help="PGExplainer training epochs.")] = 20,
    rg_epochs: Annotated[int, typer.Option(min=1, help="RG-Explainer training epochs.")] = 8,
    samples: Annotated[int, typer.Option(min=1, help="Invalid training groups used.")] = 1200,
    seed: Annotated[int, typer.Option(min=0, help="Seed for sampling and initialisation.")] = 0,
) -> None:
    """Pre-train the explainers that need it (PGExplainer, RG-Explainer) on the classifier's training split."""
    import time as _time

    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from fuseplan.explain import gnn
    from fuseplan.explain.dataset import load_dataset
    from fuseplan.explain.explainers.rg import save_rg_explainer, train_rg_explainer
    from fuseplan.explain.pg import save_pg_explainer, train_pg_explainer

    check_output_dir(output_dir)
    inputs = [dataset / f"{scheme.value}.npz", dataset / "meta.json", *([weights] if weights else [])]
    if output_dir.is_dir():
        check_outputs([(f"{kind} weights", output_dir / f"{kind}-{scheme.value}.pt") for kind in ("pg", "rg")], inputs)
    data, _ = load_dataset(dataset, scheme.value)  # a bad dataset is named before the weights are judged
    model, _ = gnn.load_classifier(scheme.value, weights)
    output_dir.mkdir(parents=True, exist_ok=True)
    # on a terminal only, as every long command: the epochs of each explainer, its last figure, the time left
    progress = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[figure]}"))
    with progress:
        start = _time.perf_counter()
        pg_task = progress.add_task("PGExplainer epochs", total=pg_epochs, figure="")
        pg = train_pg_explainer(model, data, epochs=pg_epochs, samples=samples, seed=seed,
                                on_epoch=lambda e, loss: progress.update(pg_task, completed=e,
                                                                         figure=f"loss {loss:.4f}"))
        save_pg_explainer(pg, scheme.value, output_dir / f"pg-{scheme.value}.pt")
        middle = _time.perf_counter()
        progress.refresh()  # its last epoch is drawn before the next explainer's bar takes its place
        progress.remove_task(pg_task)
        rg_task = progress.add_task("RG-Explainer epochs", total=rg_epochs, figure="")
        rg = train_rg_explainer(model, data, epochs=rg_epochs, samples=samples, seed=seed,
                                on_epoch=lambda e, r: progress.update(rg_task, completed=e,
                                                                      figure=f"mean reward {r:.4f}"))
        save_rg_explainer(rg, scheme.value, output_dir / f"rg-{scheme.value}.pt")
    stdout.print(f"PGExplainer trained in {middle - start:.0f} s, "
                 f"RG-Explainer in {_time.perf_counter() - middle:.0f} s; written to {output_dir}", highlight=False)


@classifier_app.command("evaluate")
def classifier_evaluate(
    scheme: Annotated[Scheme, typer.Option(help="Which scheme's classifier.")] = Scheme.lbdf,
    dataset: Annotated[Optional[Path], typer.Option("--dataset", help="Score on this dataset.")] = None,
    models: Annotated[Optional[list[str]], typer.Option(
        "--models", help="Score on groups sampled from these ONNX files or zoo names (repeatable).")] = None,
    split: Annotated[Optional[str], typer.Option(
        help="With --dataset: score only the 'test' (or 'val', 'train') part of the seeded 80/10/10 split.")] = None,
    weights: Annotated[Optional[Path], typer.Option(help="Weights file (default: the shipped ones).")] = None,
    groups: Annotated[int, typer.Option("--groups", min=1, help="With --models: groups sampled per model.")] = 500,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the split or of the sampling.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Score the classifier: accuracy, F1 and the confusion matrix."""
    from fuseplan.explain import gnn
    from fuseplan.explain.dataset import load_dataset, sample_dataset

    if (dataset is None) == (not models):
        raise FuseplanError("give either --dataset DIR or --models MODEL [--models MODEL ...]")
    # the inputs are read before the weights are judged, so a bad file is named first; the classifier is
    # loaded before groups are sampled, so stale weights fail fast
    if dataset is not None:
        data, _ = load_dataset(dataset, scheme.value)
        model, _ = gnn.load_classifier(scheme.value, weights)
        indices = None
        if split is not None:
            parts = dict(zip(("train", "val", "test"), gnn.split_indices(len(data), seed)))
            if split not in parts:
                raise FuseplanError(f"--split must be train, val or test, not {shown(split)}")
            indices = parts[split]
        source = f"{dataset}" + (f" ({split} split)" if split else "")
    else:
        graphs = {Path(m).stem if m.endswith(".onnx") else m: load_model(m, None) for m in models or []}
        model, _ = gnn.load_classifier(scheme.value, weights)
        data = sample_dataset(graphs, scheme.value, {name: groups for name in graphs}, seed)
        _warn_short_samples({name: int((data.model == i).sum()) for i, name in enumerate(data.models)},
                            {name: groups for name in graphs}, scheme.value)
        indices = None
        source = ", ".join(graphs)
    result = gnn.evaluate(model, gnn.SampleBatches(data, indices))
    if as_json:
        print(dumps_json({"scheme": scheme.value, "source": source, **result.as_dict()}, indent=2))
        return
    c = result.confusion
    stdout.print(
        f"{scheme.value.upper()} classifier on {source}: {result.samples} samples\n"
        f"accuracy {100 * result.accuracy:.2f}%, F1 {100 * result.f1:.2f}% (valid = positive)\n"
        f"confusion: {c['tp']} valid predicted valid, {c['fn']} valid predicted invalid, "
        f"{c['fp']} invalid predicted valid, {c['tn']} invalid predicted invalid", highlight=False)
