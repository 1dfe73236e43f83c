"""Running a sweep: one Ray task per cell (``scheduler``), what a task does to run one
cell's engine and replay (``run_cell``), and grading each stored run against its
control's (``grading``); the canary report read from its sweep (``canary_report``)."""
