"""Schedules: workflows started on a cron, rate or one-time schedule (EventBridge Scheduler's formats).

==================  ==========================================================================
module              what
==================  ==========================================================================
``expressions``     ``cron(...)``, ``rate(...)`` and ``at(...)`` in an IANA time zone: parse, refuse
                    clearly, next firing after a time (pure; zoneinfo only)
``record``          a schedule's record: its newest firing, outcome and last started execution
``config``          the deployed schedules (``LOOM_SCHEDULES``, rendered by Terraform), validated
``fire``            one firing: idempotent by its token, ``skip`` or ``allow`` overlap, recorded
==================  ==========================================================================

Nothing is imported here, so ``ports`` can import ``record`` without pulling the engine in.
"""
