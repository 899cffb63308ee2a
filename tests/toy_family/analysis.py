"""The toy family's figure (`vspec analyze --what gates`): the learned ReZero gates of each gated block, the
attention's and the FFN's, by depth. Only for a model with gated blocks (`AnalysisError` otherwise)."""

from vspec.analysis import AnalysisError, Figure, Inputs, nonfinite_result, pyplot

from .modules import GatedBlock


def gates(model) -> list[list[float]]:
    """[g1, g2] of each gated block in forward order."""
    found = [block.gates.detach().double().tolist() for stage in model.stages for block in stage.blocks
             if isinstance(block, GatedBlock)]
    if not found:
        raise AnalysisError("the model has no gated block")
    return found


def gates_figure(model, inputs: Inputs) -> Figure:
    result = {"gates": gates(model)}

    def plot(path, title):
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(4, 3))
        for i, label in enumerate(("attention", "ffn")):
            ax.plot([g[i] for g in result["gates"]], marker="o", label=label)
        ax.set_xlabel("gated block")
        ax.set_ylabel("gate")
        ax.legend()
        fig.suptitle(title)
        fig.savefig(path, dpi=60)
        plt.close(fig)

    return Figure(result, plot, nonfinite_result(result))
