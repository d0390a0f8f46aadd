"""The simulated cluster as a world: discrete events on a virtual clock (:mod:`.cluster`), the
same cluster on a scaled wall clock behind ``gpufleet serve`` (:mod:`.live`), the controllers of
its jobs, its faults and node pools, and the runs, recorders and results of ``gpufleet simulate``
(:mod:`.run`)."""
