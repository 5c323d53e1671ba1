"""SwitchAgg's control side: configuring a switch running the `switchagg` program."""
