"""What `vmatrix sweep plan` can say of a cell's shapes before any engine starts.

The block a shaped workload is laid out on is the engine's, known once it starts; a
``cold_race`` hunts chunk-split poisoning only if the cell's token budget splits its
concurrent prompts (jobs.shapes.fragments), so the plan names the cells whose budget or
``max_num_seqs`` cannot, or can only above some block size.
"""

from __future__ import annotations

from vmatrix.cells import Cell
from vmatrix.jobs.shapes import fragments, race_lengths
from vmatrix.orchestrator.spec.workload import workload_spec


def shape_notes(cell: Cell) -> list[str]:
    """One line per cold_race shape of a prefix-caching cell that may not fragment."""
    spec = workload_spec(cell)
    if spec.shapes is None or cell.is_control or not cell.knobs.get("prefix_caching"):
        return []
    budget, seqs = cell.knobs.get("max_num_batched_tokens"), cell.knobs.get("max_num_seqs")
    notes = []
    for shape in (s for s in spec.shapes if s.kind == "cold_race"):
        concurrent = min(shape.prompts, seqs or shape.prompts)
        if budget is None:
            notes.append(f"{shape.name}: the engine's default token budget; set max_num_batched_tokens below "
                         f"{concurrent} prompts' tokens to fragment them")
        elif spec.probe_block_tokens is not None:
            if not fragments(shape, spec.probe_block_tokens, budget, seqs):
                notes.append(f"{shape.name}: cannot fragment: {concurrent} prompts at once take "
                             f"{sum(race_lengths(shape, spec.probe_block_tokens)[:concurrent])} tokens, the budget is "
                             f"{budget}")
        else:
            # The prompts' lengths grow with the block: they overrun the budget once it exceeds this.
            per_block = sum(race_lengths(shape, 1000)[:concurrent]) / 1000
            notes.append(f"{shape.name}: fragments only if the engine's block exceeds {budget / per_block:.0f} tokens "
                         f"({concurrent} prompts at once, budget {budget})")
    return notes
