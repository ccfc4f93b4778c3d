#!/usr/bin/python3
"""optim-ref.py: PyTorch 1.13 references for tests/engine/optim.

Usage: optim-ref.py IN OUT. IN holds whitespace-separated tokens: the
number of cases, then each case as `case KIND ...`:

  case optim KIND(sgd|adam|adamw) DTYPE(f32|f64) lr momentum dampening
             weight_decay nesterov beta1 beta2 eps amsgrad
             P  { numel values... } * P                  (initial params)
             S  { lr momentum { has [values...] } * P } * S
       (momentum is SGD's momentum or Adam's beta1 for that step; a
        param with has = 0 has grad None for that step)
       -> every parameter, flattened, after every step
  case sched KIND OPT(sgd|adam) lr step_size gamma total_steps eta_min
             warmup_steps warmup_start_factor pct_start div_factor
             final_div_factor cycle_momentum base_momentum max_momentum
             NSTEPS
       -> NSTEPS lrs, then NSTEPS momenta (SGD momentum or Adam beta1)
  case clip DTYPE max_norm P { has numel values... } * P
       -> the total norm, then the present gradients after clipping

OUT gets one line per case: a count, then that many numbers. Exits 77
when torch cannot be imported (the test then skips).
"""
import sys
import warnings

try:
    import torch
except ImportError:
    sys.exit(77)

warnings.filterwarnings("ignore")
torch.set_num_threads(1)


class Tokens:
    def __init__(self, text):
        self.t = text.split()
        self.k = 0

    def word(self):
        self.k += 1
        return self.t[self.k - 1]

    def num(self):
        return float(self.word())

    def int(self):
        return int(self.word())

    def values(self, n):
        v = [float(x) for x in self.t[self.k:self.k + n]]
        self.k += n
        return v


def dtype_of(name):
    return {"f32": torch.float32, "f64": torch.float64}[name]


def run_optim(tk):
    kind, dt = tk.word(), dtype_of(tk.word())
    lr, momentum, dampening, wd = tk.num(), tk.num(), tk.num(), tk.num()
    nesterov = tk.int() != 0
    beta1, beta2, eps = tk.num(), tk.num(), tk.num()
    amsgrad = tk.int() != 0
    params = []
    for _ in range(tk.int()):
        n = tk.int()
        params.append(torch.tensor(tk.values(n), dtype=dt).requires_grad_())
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening,
                              weight_decay=wd, nesterov=nesterov, foreach=False)
    else:
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        opt = cls(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd,
                  amsgrad=amsgrad, foreach=False)
    out = []
    for _ in range(tk.int()):
        group = opt.param_groups[0]
        group["lr"] = tk.num()
        m = tk.num()
        if kind == "sgd":
            group["momentum"] = m
        else:
            group["betas"] = (m, group["betas"][1])
        for p in params:
            if tk.int():
                p.grad = torch.tensor(tk.values(p.numel()), dtype=dt)
            else:
                p.grad = None
        opt.step()
        for p in params:
            out.extend(p.detach().double().tolist())
    return out


def run_sched(tk):
    kind, opt_kind = tk.word(), tk.word()
    lr, step_size, gamma = tk.num(), tk.int(), tk.num()
    total, eta_min = tk.int(), tk.num()
    warmup, start_factor = tk.int(), tk.num()
    pct_start, div_factor, final_div_factor = tk.num(), tk.num(), tk.num()
    cycle, base_m, max_m = tk.int() != 0, tk.num(), tk.num()
    nsteps = tk.int()
    p = torch.zeros(1, requires_grad=True)
    if opt_kind == "sgd":
        opt = torch.optim.SGD([p], lr=lr, momentum=0.9)
    else:
        opt = torch.optim.Adam([p], lr=lr, betas=(0.9, 0.999))
    O = torch.optim.lr_scheduler
    if kind == "constant":
        sched = None
    elif kind == "step":
        sched = O.StepLR(opt, step_size=step_size, gamma=gamma)
    elif kind == "cosine":
        sched = O.CosineAnnealingLR(opt, T_max=total, eta_min=eta_min)
    elif kind == "warmup":
        sched = O.LinearLR(opt, start_factor=start_factor, end_factor=1.0, total_iters=warmup)
    elif kind == "warmup-cosine":
        sched = O.SequentialLR(opt, [
            O.LinearLR(opt, start_factor=start_factor, end_factor=1.0, total_iters=warmup),
            O.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=eta_min)],
            milestones=[warmup])
    elif kind == "onecycle":
        sched = O.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=pct_start,
                             div_factor=div_factor, final_div_factor=final_div_factor,
                             cycle_momentum=cycle, base_momentum=base_m, max_momentum=max_m)
    else:
        raise ValueError(kind)
    lrs, moms = [], []
    for t in range(nsteps):
        group = opt.param_groups[0]
        lrs.append(group["lr"])
        moms.append(group["momentum"] if opt_kind == "sgd" else group["betas"][0])
        if t + 1 < nsteps:
            opt.step()
            if sched is not None:
                sched.step()
    return lrs + moms


def run_clip(tk):
    dt = dtype_of(tk.word())
    max_norm = tk.num()
    params = []
    for _ in range(tk.int()):
        has, n = tk.int(), tk.int()
        p = torch.zeros(n, dtype=dt, requires_grad=True)
        if has:
            p.grad = torch.tensor(tk.values(n), dtype=dt)
        params.append(p)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    out = [float(total)]
    for p in params:
        if p.grad is not None:
            out.extend(p.grad.double().tolist())
    return out


def main():
    with open(sys.argv[1]) as f:
        tk = Tokens(f.read())
    lines = []
    for _ in range(tk.int()):
        assert tk.word() == "case"
        kind = tk.word()
        out = {"optim": run_optim, "sched": run_sched, "clip": run_clip}[kind](tk)
        lines.append(" ".join([str(len(out))] + [repr(float(v)) for v in out]))
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
