//! hostlib: end-host protocol logic, sans-IO (packets and time in, packets and deadlines
//! out). The in-network applications add their host sides here: aggregation mappers and
//! reducers (DAIET, SwitchAgg), search servers and agent (NetSHa), KV and lock clients and
//! servers (Hare), tenant adapters and the goalkeeper (INaaS).
