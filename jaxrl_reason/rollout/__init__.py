"""Multi-turn, tool-using rollouts: tools and their environment (`tools.py`), and the rollout that continues each
conversation from its KV cache with per-token model/environment masks (`multiturn.py`)."""
from jaxrl_reason.rollout.multiturn import MultiTurnOutput, ToolConfig, multi_turn_sample
from jaxrl_reason.rollout.tools import (TOOLS, Calculator, PythonTool, Step, ToolEnv, ToolResult, make_tool,
                                        register_tool, step_all)

__all__ = ["MultiTurnOutput", "ToolConfig", "multi_turn_sample", "TOOLS", "Calculator", "PythonTool", "Step",
           "ToolEnv", "ToolResult", "make_tool", "register_tool", "step_all"]
