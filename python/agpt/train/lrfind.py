"""`agpt lr-find`: an exponential learning-rate sweep over a short run, before committing a big one.

The LR is raised geometrically each step from `lr_min` to `lr_max`; the smoothed loss is tracked
until it blows up: after falling, it climbs back above the loss the model started from (training now
undoes itself), or a raw loss exceeds 4× the best, or goes non-finite.  Two suggestions are reported:
the LR where the loss falls fastest (steepest descent of smoothed loss against log LR, looked for only
before the loss minimum, since noise past the blow-up also has steep slopes) and a tenth of the
blow-up LR (a common, conservative peak LR).  A PNG plot of loss against LR lets a human check.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from agpt import figure, safewrite
from agpt.errors import BadInput
from agpt.train.config import load_config


@dataclass(kw_only=True, slots=True)
class Sweep:
    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    steepest_lr: float
    blowup_lr: float | None

    @property
    def suggested_lr(self) -> float:
        return (self.blowup_lr if self.blowup_lr is not None else self.lrs[-1]) / 10


def smooth(losses: list[float], beta: float = 0.7) -> list[float]:
    """Bias-corrected exponential moving average (the first value is the first loss)."""
    out: list[float] = []
    avg = 0.0
    for i, loss in enumerate(losses):
        avg = beta * avg + (1 - beta) * loss
        out.append(avg / (1 - beta ** (i + 1)))
    return out


def blew_up(losses: list[float]) -> bool:
    """The smoothed loss fell and then rose above where it started, or a loss is 4× the best."""
    sm = smooth(losses)
    return len(sm) > 3 and (min(sm) < sm[0] < sm[-1] or losses[-1] > 4 * min(losses))


def analyse(lrs: list[float], losses: list[float], blowup_lr: float | None) -> Sweep:
    """The steepest negative slope of the smoothed loss against log LR, up to the loss minimum."""
    smoothed = smooth(losses)
    lowest = min(range(len(smoothed)), key=smoothed.__getitem__)
    best = 0
    slope_best = math.inf
    for i in range(1, max(lowest, 1) + 1):
        dx = math.log(lrs[i]) - math.log(lrs[i - 1])
        slope = (smoothed[i] - smoothed[i - 1]) / dx if dx else 0.0
        if slope < slope_best:
            slope_best, best = slope, i
    return Sweep(lrs=lrs, losses=losses, smoothed=smoothed, steepest_lr=lrs[best], blowup_lr=blowup_lr)


def plot(sweep: Sweep, path: Path) -> None:
    plt = figure.pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sweep.lrs, sweep.losses, alpha=0.35, label="loss")
    ax.plot(sweep.lrs, sweep.smoothed, label="smoothed loss")
    ax.axvline(sweep.steepest_lr, color="g", ls="--", label=f"steepest {sweep.steepest_lr:.2e}")
    ax.axvline(sweep.suggested_lr, color="r", ls=":", label=f"blow-up/10 {sweep.suggested_lr:.2e}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("loss")
    ax.set_title("agpt lr-find")
    ax.legend()
    fig.tight_layout()
    fmt = path.suffix.lstrip(".").lower() or "png"
    try:
        safewrite.replace_with(path, lambda f: fig.savefig(f, format=fmt, dpi=100))  # never through a link
    finally:
        plt.close(fig)


def lr_find(
    config: str,
    *,
    out: str | None = None,
    steps: int = 100,
    lr_min: float = 1e-6,
    lr_max: float = 1.0,
    sets: tuple[str, ...] | list[str] = (),
) -> int:
    """Run the sweep on every rank; rank 0 prints the two LRs and writes the PNG (and a JSON beside it)."""
    if not 0 < lr_min < lr_max:
        raise BadInput(f"--lr-min {lr_min} / --lr-max {lr_max}: need 0 < lr-min < lr-max")
    if steps < 3:
        raise BadInput(f"--steps {steps}: need at least 3 steps")
    cfg = load_config(config, list(sets), flags={"train.steps": steps})
    from agpt.train.entry import NonFinite
    from agpt.train.trainer import Trainer

    run_dir = Path(cfg.train.run_dir) if cfg.train.run_dir else None
    png = Path(out) if out else (run_dir or Path(".")) / "lr_find.png"
    trainer = Trainer(cfg, None, checkpoints=False)
    ratio = lr_max / lr_min
    trainer.lr_fn = lambda s: lr_min * ratio ** (s / (steps - 1))
    lrs: list[float] = []
    losses: list[float] = []
    blowup: float | None = None
    for s in range(steps):
        lr = trainer.lr_fn(s)
        try:
            rec, _ = trainer.train_step()
        except NonFinite:
            blowup = lr
            break
        lrs.append(lr)
        losses.append(rec.loss)
        if trainer.rank == 0:
            print(
                f"step={rec.step} lr={lr:.3e} loss={rec.loss:.6f} grad_norm={rec.grad_norm:.4g}", flush=True
            )
        if blew_up(losses):
            blowup = lr
            break
    if len(losses) < 2:
        raise BadInput(f"--lr-min {lr_min}: the loss blew up at once; lower --lr-min")
    sweep = analyse(lrs, losses, blowup)
    if trainer.rank == 0:
        plot(sweep, png)
        result = {
            "steepest_lr": sweep.steepest_lr,
            "blowup_lr": sweep.blowup_lr,
            "suggested_lr": sweep.suggested_lr,
            "lrs": sweep.lrs,
            "losses": sweep.losses,
        }
        safewrite.replace(png.with_suffix(".json"), json.dumps(result, indent=1) + "\n")
        where = f"{sweep.blowup_lr:.3e}" if sweep.blowup_lr is not None else "none within the sweep"
        print(
            f"lr-find: steepest descent lr={sweep.steepest_lr:.3e}; blow-up lr={where}; "
            f"blow-up/10 lr={sweep.suggested_lr:.3e}; plot {png}",
            flush=True,
        )
    return 0
