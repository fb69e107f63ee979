"""GPU check: the snapshot verifies under torch.compile(fullgraph=True) run the CuTe kernels
through their custom ops and match eager bit for bit (states and outputs), Mamba-2 and GDN."""
import torch
import replayssm_lp as R

torch.manual_seed(0)
dev = "cuda"
b, T, H, P, N, G = 4, 4, 8, 64, 128, 1
si = torch.arange(b * T, dtype=torch.int32, device=dev).view(b, T)
si[1] = -1
nacc = torch.tensor([1, 0, 3, 4], dtype=torch.int32, device=dev)
st = torch.randn(b * T, H, P, N, device=dev)
x, dt = torch.randn(b, T, H, P, device=dev), torch.rand(b, T, H, device=dev)
A = -torch.rand(H, device=dev)
B, C = torch.randn(b, T, G, N, device=dev), torch.randn(b, T, G, N, device=dev)


def m2(s, x, dt, B, C, n):
    return R.mamba2_snapshot_verify(s, x, dt, A, B, C, state_indices=si, num_accepted_tokens=n)


s1, s2 = st.clone(), st.clone()
y1 = torch.compile(m2, fullgraph=True)(s1, x, dt, B, C, nacc)
y2 = m2(s2, x, dt, B, C, nacc)
torch.cuda.synchronize()
print("mamba2 compiled == eager:", torch.equal(y1, y2), torch.equal(s1, s2))
HK, HV, K, V = 2, 4, 128, 128
gs = torch.randn(b * T, HV, V, K, device=dev) * 0.05
q, k = torch.randn(b, T, HK, K, device=dev), torch.randn(b, T, HK, K, device=dev)
v = torch.randn(b, T, HV, V, device=dev)
g, beta = -torch.rand(b, T, HV, device=dev), torch.rand(b, T, HV, device=dev)


def gdn(s, q, k, v, g, beta, n):
    return R.gdn_snapshot_verify(s, q, k, v, g, beta, state_indices=si, num_accepted_tokens=n)


s1, s2 = gs.clone(), gs.clone()
y1 = torch.compile(gdn, fullgraph=True)(s1, q, k, v, g, beta, nacc)
y2 = gdn(s2, q, k, v, g, beta, nacc)
torch.cuda.synchronize()
print("gdn compiled == eager:", torch.equal(y1, y2), torch.equal(s1, s2))
