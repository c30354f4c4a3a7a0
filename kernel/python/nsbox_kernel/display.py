"""Figures become display items: matplotlib runs on nsbox's backend (Agg, headless) whose
show() saves every open figure as a PNG under the output directory; figures still open at
the end of a cell are saved too."""
import os

_items = []      # display items of the running cell
_context = {"dir": None, "cell": 0, "count": 0}


def begin_cell(output_dir, cell):
    _items.clear()
    _context.update(dir=output_dir, cell=cell, count=0)


def capture_open_figures():
    import sys
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for number in pyplot.get_fignums():
        figure = pyplot.figure(number)
        _context["count"] += 1
        os.makedirs(_context["dir"], exist_ok=True)
        path = os.path.join(_context["dir"], f"cell-{_context['cell']}-figure-{_context['count']}.png")
        figure.savefig(path, format="png")
        width, height = figure.canvas.get_width_height()
        _items.append({"type": "image/png", "path": path, "width": width, "height": height})
    pyplot.close("all")


def end_cell():
    capture_open_figures()
    return list(_items)
