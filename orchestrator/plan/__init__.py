"""Planning a sweep, before anything runs: a validated matrix file (orchestrator/spec/)
expanded into cells with their controls (``matrix``), where each engine's patches come
from (``patch_sources``), release ranges resolved to one engine per release
(``release_ranges``), the shapes' budget rules checked per cell (``shape_plan``), and the
canary model the cells serve, shipped or built (``canary``)."""
