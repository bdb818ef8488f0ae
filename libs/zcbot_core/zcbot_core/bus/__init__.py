"""The bus protocol: every NATS subject, stream, consumer, KV bucket and message schema.

No service writes a subject string: they call the functions of `Topology` and encode/decode
with `codec`. See DESIGN §3.
"""

from zcbot_core.bus.codec import BusDecodeError, decode, encode, tag_of
from zcbot_core.bus.messages import (
    BackgroundStop,
    CancelRequest,
    ChannelInbound,
    EgressUsageReply,
    EgressUsageReport,
    ExecutorProbe,
    ExecutorProbeReply,
    FileChangesReport,
    ProcsReply,
    ProcsRequest,
    PushReply,
    PushRequest,
    RunRequest,
    ToolCallReply,
    ToolCallRequest,
    ToolCancel,
)
from zcbot_core.bus.subjects import Topology

__all__ = [
    "BackgroundStop",
    "ProcsReply",
    "ProcsRequest",
    "BusDecodeError",
    "CancelRequest",
    "ChannelInbound",
    "EgressUsageReply",
    "EgressUsageReport",
    "ExecutorProbe",
    "ExecutorProbeReply",
    "FileChangesReport",
    "PushReply",
    "PushRequest",
    "RunRequest",
    "ToolCallReply",
    "ToolCallRequest",
    "ToolCancel",
    "Topology",
    "decode",
    "encode",
    "tag_of",
]
