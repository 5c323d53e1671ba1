"""INaaS (INaaS paper, §IV–§VI): tenants, the controller's scheduling, detection and
pricing, and the application adapters, on the in-process service of
`inswitch._native.InaasService` (the real switch model with `forward` + `inaas`, the
goalkeeper and the tenants, on simulated time)."""
