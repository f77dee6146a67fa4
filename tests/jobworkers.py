"""Workers for tests/test_jobs.py, importable by Ray actors (tests/ is on their PYTHONPATH)."""
import os


class Square:
    """y = x**2; x == 3 is a bad input; with `die_marker`, the first call kills its process once."""

    def __init__(self, die_marker=None, threads=None):
        self.die_marker = die_marker

    def __call__(self, payload):
        if payload["x"] == 3:
            raise ValueError("three is a bad input")
        if self.die_marker and not os.path.exists(self.die_marker):
            open(self.die_marker, "w").close()
            os._exit(1)                      # the actor dies mid-task: Ray restarts it and retries
        if payload.get("sleep"):
            import time
            time.sleep(payload["sleep"])     # slow rows: every actor of the pool gets some
        import ray
        return {"y": payload["x"] ** 2, "node": ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""}
