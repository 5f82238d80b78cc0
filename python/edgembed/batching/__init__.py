"""Adaptive SLO batching: group requests into batches that keep a latency target.

request ─► admit (bounded queue, predicted latency) ─► queue (lanes, deadlines)
        ─► policy.decide (wait or dispatch, which requests) ─► worker ─► target(texts)
        ─► vectors cut back per request; the batch's service time feeds the cost model

``AdaptiveBatcher`` is the live batcher on threads, ``EventLoopBatcher`` the same on an asyncio
loop (hosts without threads: Pyodide); both drive one ``core``. ``Scheduler`` is the clock-free
state machine they share with the simulator; ``policy`` the pure decisions; ``cost_model`` the
online service-time fit.
"""

from __future__ import annotations

from .batcher import AdaptiveBatcher
from .cost_model import CostModel, CostPrior
from .event_loop import EventLoopBatcher
from .metrics import BatcherStats, prometheus_text
from .policy import Lane, PolicyConfig
from .scheduler import Outcome, Scheduler
from .simulator import LinearService, SimResult, load_service_fixture, simulate
from .traces import Trace, TraceRequest

__all__ = [
    "AdaptiveBatcher",
    "BatcherStats",
    "CostModel",
    "CostPrior",
    "EventLoopBatcher",
    "Lane",
    "LinearService",
    "Outcome",
    "PolicyConfig",
    "Scheduler",
    "SimResult",
    "Trace",
    "TraceRequest",
    "load_service_fixture",
    "prometheus_text",
    "simulate",
]
