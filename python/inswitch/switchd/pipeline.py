"""The forwarding pipeline config a switch runs: which programs, their P4Info, and what a
controller sent to install them (device config and cookie, echoed back on Get)."""

from __future__ import annotations

from dataclasses import dataclass

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from inswitch import native
from inswitch.p4rt import p4info as p4info_mod
from inswitch.p4rt.schema import P4InfoIndex

from .status import invalid


@dataclass(frozen=True)
class Pipeline:
    programs: tuple[str, ...]
    info: native.ProgramSetInfo
    p4info: p4info_pb2.P4Info
    index: P4InfoIndex
    device_config: bytes
    cookie: int | None  # None: installed from the command line, not by SetForwardingPipelineConfig
    target: str | None = None  # the switch's target, which sizes some programs (inaas); None: unbounded

    @classmethod
    def for_programs(cls, programs: list[str], device_config: bytes | None = None, cookie: int | None = None,
                     target: str | None = None) -> Pipeline:
        """Raises ValueError for unknown programs or sets the data plane cannot combine.
        `target`: the switch's, so the P4Info lists the arrays that switch loads."""
        known = native.program_names()
        unknown = [p for p in programs if not native.is_program(p)]
        if unknown:
            raise ValueError(f"unknown program {unknown[0]!r} (known: {', '.join(known)})")
        info = native.program_set_info(list(programs), target)
        p4 = p4info_mod.build_p4info(info)
        return cls(tuple(programs), info, p4, P4InfoIndex(p4), device_config if device_config is not None else p4info_mod.device_config(list(programs)), cookie,
                   target)

    def forwarding_config(self, response_type: int) -> p4runtime_pb2.ForwardingPipelineConfig:
        """The config as GetForwardingPipelineConfig returns it for `response_type`."""
        rt = p4runtime_pb2.GetForwardingPipelineConfigRequest
        cfg = p4runtime_pb2.ForwardingPipelineConfig()
        if response_type in (rt.ALL, rt.P4INFO_AND_COOKIE):
            cfg.p4info.CopyFrom(self.p4info)
        if response_type in (rt.ALL, rt.DEVICE_CONFIG_AND_COOKIE):
            cfg.p4_device_config = self.device_config
        if self.cookie is not None:
            cfg.cookie.cookie = self.cookie
        return cfg


def verify(config: p4runtime_pb2.ForwardingPipelineConfig, target: str | None = None) -> Pipeline:
    """The pipeline a SetForwardingPipelineConfig request asks for, or INVALID_ARGUMENT.

    The programs come from the device config; the P4Info sent with it must describe the
    same entities as the one we derive for those programs (on the switch's `target`), so a controller built against
    another program (or another version of one) is stopped before it writes anything."""
    try:
        programs = p4info_mod.parse_device_config(config.p4_device_config)
    except ValueError as e:
        raise invalid(str(e)) from None
    try:
        pipe = Pipeline.for_programs(programs, bytes(config.p4_device_config), config.cookie.cookie if config.HasField("cookie") else None, target)
    except ValueError as e:
        raise invalid(f"cannot load {','.join(programs)}: {e}") from None
    if not config.HasField("p4info"):
        raise invalid("the config has no P4Info (write it with `inswitch p4info`)")
    diff = p4info_mod.first_difference(pipe.p4info, config.p4info)
    if diff is not None:
        raise invalid(f"the P4Info does not match programs {','.join(programs)}: {diff}")
    return pipe
