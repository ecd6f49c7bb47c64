"""Planning: a resource request and a cluster profile become a Plan (no torch here)."""

from scaletrain.planning.plan import BillingEstimate, Plan, read_plan, write_plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request

__all__ = ["BillingEstimate", "Plan", "Request", "plan_job", "read_plan", "write_plan"]
