"""The matrix file a user writes, validated with pydantic, one module per part of it:
``knobs`` (what varies between cells, the axes and the include/exclude/control rules),
``engines`` (releases, patch sets, the model), ``workload`` (what is replayed and how it
is graded) and ``matrix_file`` (the whole file, its resources and timeouts, and loading
it with errors that point at the file's lines)."""
