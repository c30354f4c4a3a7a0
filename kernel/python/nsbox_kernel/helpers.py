"""The helpers preloaded in every cell: run_tool (alias run_composio_tool), invoke_llm,
upload_local_file and set_progress. The first three forward to the supervisor's tool
bridge and return (result, error) tuples, never raising; they are safe to call from many
threads at once (agents fan tool calls out through a ThreadPoolExecutor)."""


class Helpers:
    def __init__(self, channel, current_cell):
        self._channel = channel
        self._current_cell = current_cell  # a callable giving the running cell's number

    def _bridge(self, name, **args):
        try:
            reply = self._channel.call("helper", name=name, args=args)
        except Exception as e:  # the socket broke under us
            return None, f"{name}: {e}"
        return reply.get("result"), reply.get("error")

    def run_tool(self, tool_slug, arguments=None, **kwargs):
        """Runs a tool through the bridge: run_tool("GITHUB_LIST_REPOS", {"owner": "x"})."""
        return self._bridge("run_tool", tool=tool_slug, arguments=arguments or {}, options=kwargs)

    def invoke_llm(self, query, **kwargs):
        """Asks a language model through the bridge; the API key stays outside the sandbox."""
        return self._bridge("invoke_llm", query=query, options=kwargs)

    def upload_local_file(self, *paths):
        """Publishes files from the sandbox through the bridge; returns their locations."""
        return self._bridge("upload_local_file", paths=[str(p) for p in paths])

    def set_progress(self, current_step, current_step_metric=None):
        """Reports progress of a long cell: set_progress("FETCHING_EMAILS", "10/100 emails")."""
        self._channel.send({"event": "progress", "cell": self._current_cell(),
                            "current_step": str(current_step),
                            "current_step_metric": None if current_step_metric is None else str(current_step_metric)})

    def install(self, namespace):
        namespace["run_tool"] = self.run_tool
        namespace["run_composio_tool"] = self.run_tool
        namespace["invoke_llm"] = self.invoke_llm
        namespace["upload_local_file"] = self.upload_local_file
        namespace["set_progress"] = self.set_progress
