"""`tandem plot`: learning curves against global env steps."""

from __future__ import annotations

import os
from typing import Optional

from tandem.agents.runtime import logs
from tandem.agents.runtime.rundir import RunDir


def plot_run(run_dir: str, out: Optional[str] = None) -> str:
  rd = RunDir(run_dir)
  eval_csv = os.path.join(rd.logs, 'evaluator.csv')
  if not os.path.isfile(eval_csv):
    raise FileNotFoundError(f'{eval_csv}: no evaluator log; is {run_dir} a '
                            'Tandem run directory with an evaluation yet?')
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4))
  for name in sorted(os.listdir(rd.logs)):
    if name.startswith('actor_') and name.endswith('.csv'):
      rows = logs.read_csv(os.path.join(rd.logs, name))
      if rows:
        ax.plot([r['env_steps'] for r in rows],
                [r['episode_return'] for r in rows], '.', alpha=0.3,
                markersize=3, label=f'{name[:-4]} (episodes)')
  rows = logs.read_csv(eval_csv)
  ax.plot([r['env_steps'] for r in rows], [r['eval_return'] for r in rows],
          'o-', color='black', label='evaluator (mean action)')
  learned = [r for r in rows if isinstance(r.get('learned_return'), float)]
  if learned:
    # Adversarial runs: what the generator optimises, on the same x-axis.
    twin = ax.twinx()
    twin.plot([r['env_steps'] for r in learned],
              [r['learned_return'] for r in learned], 's--',
              color='tab:red', label='learned return (discriminator)')
    twin.set_ylabel('learned return', color='tab:red')
    twin.legend(fontsize=8, loc='lower right')
  ax.set_xlabel('global env steps')
  ax.set_ylabel('episode return')
  ax.set_title(os.path.basename(os.path.abspath(run_dir)))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  out = out or os.path.join(run_dir, 'learning_curve.png')
  fig.tight_layout()
  fig.savefig(out, dpi=100)
  plt.close(fig)
  return out
