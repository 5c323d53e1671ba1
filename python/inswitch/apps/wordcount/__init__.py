"""MapReduce WordCount through the switch (DAIET / SwitchAgg in-network aggregation), with the
tcp and udp baselines: input readers, mapper and reducer processes, the job runner and the
`inswitch wordcount` command."""
