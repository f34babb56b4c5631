"""``fuseplan zoo``: the bundled models."""

from __future__ import annotations


from rich.table import Table

from fuseplan import zoo
from fuseplan.cli.common import app, JsonOpt, print_table
from fuseplan.documents import dumps_json
from fuseplan.graph import load_graph


@app.command("zoo")
def zoo_command(as_json: JsonOpt = False) -> None:
    """List the bundled models: the reference paper's CNNs and the transformer encoders."""
    entries = []
    for kind, name in [*(("CNN", n) for n in zoo.names()), *(("transformer", n) for n in zoo.transformer_names())]:
        graph = load_graph(name)
        shape = next(iter(graph.input_shapes.values()))
        entries.append({"name": name, "kind": kind, "nodes": len(graph.nodes), "edges": len(graph.edges),
                        "params": graph.weight_numel, "input_shape": list(shape),
                        "source": graph.metadata.get("fuseplan.source", "")})
    if as_json:
        print(dumps_json(entries, indent=2))
        return
    table = Table(title="fuseplan model zoo")
    for column, justify in (("name", "left"), ("kind", "left"), ("nodes", "right"), ("edges", "right"),
                            ("params", "right"), ("input shape", "left")):
        table.add_column(column, justify=justify)
    for e in entries:
        table.add_row(e["name"], e["kind"], str(e["nodes"]), str(e["edges"]), f"{e['params']:,}",
                      "x".join(map(str, e["input_shape"])))
    print_table(table)
