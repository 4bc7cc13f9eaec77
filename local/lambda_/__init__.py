"""Lambda emulated on one machine: the emulator, its sandbox processes (``python -m
local.lambda_.invoke``), the memory limit, the CPU share and shaped bandwidth of memory M.
Kept light: every sandbox imports this package first."""
