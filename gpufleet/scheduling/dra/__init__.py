"""Dynamic Resource Allocation in the core: which devices of one node a pod's claims get.

:mod:`~gpufleet.scheduling.dra.inventory` says what a node offers (its devices from the
ResourceSlices that reach it, the shared counters left, the devices taken);
:mod:`~gpufleet.scheduling.dra.allocator` chooses devices for all of a pod's claims at once or
none, as a pure function; :mod:`~gpufleet.scheduling.dra.choice_policy` ranks the feasible
choices (by default, the one that leaves the most usable capacity). No I/O, no clock.
"""
