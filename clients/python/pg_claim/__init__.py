"""Python client of the pg_claim PostgreSQL extension.

- :class:`Worker` / :class:`AsyncWorker`: claim, run handlers concurrently,
  heartbeat leases, complete or fail, stop cleanly on SIGTERM/SIGINT.
- :class:`Client`: enqueue (in the caller's transaction), cancel,
  item_state, stats.
- :class:`PartitionedClient`: calls routed to the partitions of a
  partitioned pg_claim directly, without the PL/Proxy front (pg_claim.routing).
- Errors: :class:`PgClaimError` and subclasses, chosen by SQLSTATE.
"""
from ._common import Interval, Job, Retry, WorkerStats
from ._features import Features
from .aio import AsyncWorker
from .client import Client, ItemState, QueueStats
from .durable import Context as DurableContext, Durable, Suspended, durable
from .errors import (BadConnection, Cancelled, InvalidArgument, InvalidName, NotInstalled, NotSupported,
                     NullArgument, PermissionDenied, PermitMismatch, PgClaimError, QueueExists,
                     ReadOnly, StaleToken, Transient, UnknownQueue, classify, error_class,
                     map_error)
from .routing import PartitionedClient, PartitionUnreachable
from .worker import Worker, default_conninfo, default_worker_name

__version__ = "0.3.0"

__all__ = [
    "AsyncWorker", "BadConnection", "Cancelled", "Client", "Features", "Interval", "InvalidArgument", "InvalidName",
    "ItemState", "Job", "NotInstalled", "NotSupported", "NullArgument", "PartitionedClient",
    "PartitionUnreachable", "PermissionDenied",
    "PermitMismatch", "PgClaimError", "QueueExists", "QueueStats", "ReadOnly", "Retry",
    "StaleToken", "Transient", "UnknownQueue", "Worker", "WorkerStats", "classify",
    "default_conninfo", "default_worker_name", "error_class", "map_error",
    "Durable", "DurableContext", "Suspended", "durable",
]
