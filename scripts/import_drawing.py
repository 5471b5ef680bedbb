"""The import drawing of the root packages: rooms, floors, arrows, arrows back up, circles.

Rooms and floors are those of the import contracts in pyproject.toml (the `floors` layers,
highest first there, lowest first here), so these figures and `lint-imports`
(tests/test_import_layers.py) judge one drawing. Named here: each arrow back up and each
circle. Every import counts: module level, in a function, under TYPE_CHECKING. Rooms
inside a room (their own `layers` contracts) are drawn apart, with their own arrows back
up. Each term, and the figures: docs/import_drawing.md.

    python scripts/import_drawing.py [--config pyproject.toml]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import grimp
from importlinter.api import read_configuration

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # benchfixtures, a root package, is not installed
CONTRACT = "floors"


def read_floors(config: Path) -> list[list[str]]:
    """The rooms of each floor, lowest floor first: the layers of the `floors` contract,
    and each package of a `protected` contract (one no other room may import, so nested in
    a room of the floors) as a room of its own on a floor just above the room that holds it."""
    contracts = read_configuration(str(config))["contracts_options"]
    layers = next((c["layers"] for c in contracts if c.get("id") == CONTRACT), None)
    if layers is None:
        raise SystemExit(f"{config}: no import contract with id {CONTRACT!r}")
    # import-linter's own layer syntax: `a | b` (independent) or `a : b` on one floor.
    floors = [
        [room.strip() for room in layer.replace(":", "|").split("|")] for layer in reversed(layers)
    ]
    protected = [m for c in contracts if c["type"] == "protected" for m in c["protected_modules"]]
    for nested in protected:
        holder = next(
            i for i, rs in enumerate(floors) if any(nested.startswith(r + ".") for r in rs)
        )
        floors.insert(holder + 1, [nested])
    return floors


@dataclass
class Inside:
    """The floors inside one room, from a `layers` contract with `containers`."""

    contract: str
    container: str
    floors: list[list[str]]
    """Modules (or sub-packages) of each floor inside the container, lowest first."""
    arrows: dict[tuple[int, int], int]
    """(importer's floor, imported's floor) -> imports, between floors of the room."""

    @property
    def back_arrows(self) -> list[tuple[int, int]]:
        return sorted(pair for pair in self.arrows if pair[0] < pair[1])


def read_insides(config: Path) -> list[tuple[str, str, list[list[str]]]]:
    """(contract id, container, its floors lowest first) of each `layers` contract with
    `containers`."""
    contracts = read_configuration(str(config))["contracts_options"]
    return [
        (c["id"], container, [
            [f"{container}.{m.strip()}" for m in layer.replace(":", "|").split("|")]
            for layer in reversed(c["layers"])
        ])
        for c in contracts
        if c["type"] == "layers" and c.get("containers")
        for container in c["containers"]
    ]  # fmt: skip


def draw_inside(graph, contract: str, container: str, floors: list[list[str]]) -> Inside:
    floor_of = {m: i for i, ms in enumerate(floors) for m in ms}

    def floor(module: str) -> int | None:
        return next(
            (i for m, i in floor_of.items() if module == m or module.startswith(m + ".")), None
        )

    arrows: dict[tuple[int, int], int] = defaultdict(int)
    for importer in [container, *graph.find_descendants(container)]:
        for imported in graph.find_modules_directly_imported_by(importer):
            pair = (floor(importer), floor(imported))
            if None not in pair and pair[0] != pair[1]:
                arrows[pair] += 1
    return Inside(contract, container, floors, dict(arrows))


@dataclass
class Drawing:
    floors: list[list[str]]
    """Rooms of each floor, lowest first; rooms this tree lacks are left out."""
    missing: list[str]
    """Rooms the contract names that this tree does not have."""
    unhoused: list[str]
    """Modules in no room (a package the contract does not place yet)."""
    arrows: dict[tuple[str, str], list[tuple[str, str, int]]]
    """(importer room, imported room) -> its imports (importer, imported, line)."""
    room_circles: list[list[str]]
    module_circles: list[tuple[str, list[str]]]
    """(package, its modules that import each other round)."""
    insides: list[Inside]
    """Rooms inside a room, from their own contracts."""

    @property
    def floor_of(self) -> dict[str, int]:
        return {room: i for i, rooms in enumerate(self.floors) for room in rooms}

    @property
    def back_arrows(self) -> list[tuple[str, str]]:
        floor = self.floor_of
        return sorted(pair for pair in self.arrows if floor[pair[0]] <= floor[pair[1]])

    @property
    def circles(self) -> int:
        return len(self.room_circles) + len(self.module_circles)


def strongly_connected(nodes: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Groups of two or more nodes that reach each other (import circles). grimp nominates
    imports to cut (`nominate_cycle_breakers`) but does not name the circles, so they are
    found here by reachability: the graphs are a few dozen nodes."""
    out = defaultdict(set)
    for a, b in edges:
        out[a].add(b)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in out[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reachable = {n: reach(n) for n in nodes}
    groups: list[list[str]] = []
    placed: set[str] = set()
    for n in sorted(nodes):
        if n in placed or n not in reachable[n]:
            continue
        group = sorted(m for m in reachable[n] if n in reachable[m])
        placed.update(group)
        if len(group) > 1:
            groups.append(group)
    return groups


def draw(config: Path) -> Drawing:
    declared = read_floors(config)
    roots = read_configuration(str(config))["session_options"]["root_packages"]
    graph = grimp.build_graph(*roots, cache_dir=None)
    modules = graph.modules
    floors = [[room for room in rooms if room in modules] for rooms in declared]
    missing = [room for rooms in declared for room in rooms if room not in modules]
    floors = [rooms for rooms in floors if rooms]
    rooms = sorted((room for f in floors for room in f), key=len, reverse=True)

    def room_of(module: str) -> str | None:
        return next((r for r in rooms if module == r or module.startswith(r + ".")), None)

    unhoused = sorted(m for m in modules if room_of(m) is None and m not in roots)
    arrows: dict[tuple[str, str], list[tuple[str, str, int]]] = defaultdict(list)
    for importer in modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            pair = (room_of(importer), room_of(imported))
            if None in pair or pair[0] == pair[1]:
                continue
            for detail in graph.get_import_details(importer=importer, imported=imported):
                arrows[pair].append((importer, imported, detail["line_number"]))

    room_circles = strongly_connected(rooms, set(arrows))
    module_circles = []
    for package in sorted(m for m in modules if graph.find_children(m)):
        room = room_of(package)
        if room is None:
            continue
        # The package's own modules and sub-packages, a sub-package standing for all it holds.
        children = sorted(c for c in graph.find_children(package) if room_of(c) == room)
        edges = set()
        for child in children:
            for member in (child, *graph.find_descendants(child)):
                for imported in graph.find_modules_directly_imported_by(member):
                    target = next(
                        (c for c in children if imported == c or imported.startswith(c + ".")),
                        None,
                    )
                    if target is not None and target != child:
                        edges.add((child, target))
        module_circles += [(package, group) for group in strongly_connected(children, edges)]
    insides = [draw_inside(graph, *inside) for inside in read_insides(config)]
    return Drawing(floors, missing, unhoused, dict(arrows), room_circles, module_circles, insides)


def report(d: Drawing) -> str:
    floor = d.floor_of
    lines = [
        f"rooms {len(floor)}, floors {len(d.floors)}, arrows {len(d.arrows)}, "
        f"arrows back up {len(d.back_arrows)}, circles {d.circles}",
        "",
        "floors, lowest first:",
    ]
    lines += [f"  {i + 1:2d}  {' | '.join(rooms)}" for i, rooms in enumerate(d.floors)]
    if d.missing:
        lines.append(f"rooms the contract names and this tree lacks: {', '.join(d.missing)}")
    if d.unhoused:
        lines.append(f"modules in no room: {', '.join(d.unhoused)}")
    lines += ["", "arrows back up (importer room -> imported room: the imports):"]
    for a, b in d.back_arrows:
        imports = ", ".join(f"{i} -> {j} (l.{n})" for i, j, n in sorted(d.arrows[(a, b)]))
        lines.append(f"  {a} (floor {floor[a] + 1}) -> {b} (floor {floor[b] + 1}): {imports}")
    if not d.back_arrows:
        lines.append("  none")
    lines += ["", "circles:"]
    lines += [f"  rooms: {' <-> '.join(group)}" for group in d.room_circles]
    lines += [f"  in {package}: {' <-> '.join(group)}" for package, group in d.module_circles]
    if not d.circles:
        lines.append("  none")
    for inside in d.insides:
        figures = (
            f"floors {len(inside.floors)}, arrows {len(inside.arrows)}, "
            f"arrows back up {len(inside.back_arrows)}"
        )
        lines += ["", f"inside {inside.container} ({inside.contract}), lowest first: {figures}"]
        prefix = len(inside.container) + 1
        for i, modules in enumerate(inside.floors):
            lines.append(f"  {i + 1:2d}  {', '.join(m[prefix:] for m in modules)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "pyproject.toml")
    args = parser.parse_args(argv)
    print(report(draw(args.config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
