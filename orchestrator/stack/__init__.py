"""What vmatrix knows of the serving stack it tests, as facts about vLLM: the releases an
index lists (``versions``), the engine's argument vector and environment
(``engine_args``), the geometry rules a configuration must keep (``geometry``), and the
LMCache connector's setup (``lmcache``)."""
