"""What joins the scheduling core to a world: the ClusterBackend protocol (:mod:`.backend`), the
one control loop (:mod:`.loop`) and the one way to build a core (:mod:`.factory`)."""
