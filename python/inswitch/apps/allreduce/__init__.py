"""SwitchML-style allreduce through the `allreduce` switch program: the controller that
gives a job its memory partition and multicast group, and the training run of
`inswitch train` (see docs/allreduce.md)."""
