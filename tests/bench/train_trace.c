/* The NO_CACHING training replay (train_trace.h). The model: a GPT-like stack of `layers` blocks
 * (attention without fused kernels, so the score matrices are real tensors; a 4x MLP), fp32
 * parameters, Adam states created at the first optimizer step, bf16 activations. Each step draws
 * a sequence length between 1/8 and all of the longest, as a variable-length data loader does.
 * TRAIN_VARLEN instead replays the H200's PyTorch benchmark (tests/gpu/train.py --mode varlen):
 * d=1024, 8 layers, flash attention, a 32000-word head whose fp32 loss tensors reach 4 GiB,
 * 4..16 sequences of 128..2048 tokens, fused AdamW; `--train 30 --varlen` times a second pass
 * over 15 shapes, as gpucheck does. */
#include "train_trace.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_T 4096              /* tensors alive at once, at most */
#define VARLEN_SHAPES 15        /* train.py --warmup 3 --steps 12, as gpucheck runs it */

struct model {
	size_t hidden, vocab, heads, batch, max_seq;
	int layers;
	bool varlen;    /* TRAIN_VARLEN (see the top of the file) */
};

struct run {
	vmm_core *core;
	uint64_t native;        /* what cudaMalloc would hold now */
	uint64_t peak_native;
	uint64_t calls;
	double ns;
	int failed;
	size_t sizes[MAX_T];
	vmm_devptr ptrs[MAX_T];
	int nfree_slots, free_slots[MAX_T];
	int logits, loss;       /* TRAIN_VARLEN: the script's variables, alive across steps */
	struct phys_peak phys;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* After a call: the physical count is sampled. */
static void sample(struct run *r)
{
	phys_peak_sample(&r->phys, r->core, 0, r->native);
}

/* A tensor is an index into the run's table (-1: the allocation failed). */
static int t_alloc(struct run *r, size_t n)
{
	vmm_devptr p;
	double a = now_ns();
	int id;

	if (!r->nfree_slots || vmm_malloc(r->core, 0, n, 0, NULL, &p, NULL)) {
		r->failed++;
		return -1;
	}
	r->ns += now_ns() - a;
	r->calls++;
	id = r->free_slots[--r->nfree_slots];
	r->ptrs[id] = p;
	r->sizes[id] = n;
	r->native += native_size(n);
	if (r->native > r->peak_native)
		r->peak_native = r->native;
	sample(r);
	return id;
}

static void t_free(struct run *r, int id)
{
	double a;

	if (id < 0)
		return;
	a = now_ns();
	vmm_free(r->core, r->ptrs[id], NULL);
	r->ns += now_ns() - a;
	r->calls++;
	r->native -= native_size(r->sizes[id]);
	r->free_slots[r->nfree_slots++] = id;
	sample(r);
}

/* Parameters of one block, in PyTorch's creation order. */
enum { P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_O_W, P_O_B, P_LN2_W, P_LN2_B, P_FC1_W, P_FC1_B,
       P_FC2_W, P_FC2_B, NPARAM };

static size_t param_bytes(const struct model *m, int k)
{
	size_t h = m->hidden;
	static const int rows[NPARAM] = { 0, 0, 3, 3, 1, 0, 0, 0, 4, 4, 4, 0 };

	switch (k) {
	case P_QKV_W: case P_O_W: case P_FC1_W: case P_FC2_W:
		return (size_t)rows[k] * h * h * 4;
	case P_QKV_B: case P_FC1_B:
		return (size_t)rows[k] * h * 4;
	default:
		return h * 4;
	}
}

static uint64_t model_peak_estimate(const struct model *m)
{
	size_t t = m->batch * m->max_seq, h = m->hidden, per_layer = 0;
	uint64_t params = 0;

	for (int k = 0; k < NPARAM; k++)
		per_layer += param_bytes(m, k);
	params = (uint64_t)per_layer * (size_t)m->layers + m->vocab * h * 4;
	/* params, grads and two Adam states; 16 saved activations of t x h per layer plus the
	 * softmax; the logits and their fp32 softmax. */
	return 4 * params + (uint64_t)m->layers * (16 * t * h * 2 +
		m->batch * m->heads * m->max_seq * m->max_seq * 2) + t * m->vocab * 6;
}

static void model_for(size_t budget, struct model *m)
{
	*m = (struct model){ .hidden = 256, .vocab = 32000, .batch = 8, .max_seq = 1024,
			     .layers = 12 };
	for (;;) {
		struct model n = *m;

		n.hidden += 128;
		n.heads = n.hidden / 128;
		if (model_peak_estimate(&n) > budget)
			break;
		*m = n;
	}
	m->heads = m->hidden / 128;
}

struct saved {
	int ln1, qkv, probs, attn, res1, ln2, fc1, gelu, res2;
};

/* The head's loss and its backward (logits in bf16, the softmax in fp32); returns the gradient
 * that flows into the last block. */
static int loss(struct run *r, const struct model *m, size_t t)
{
	int logits, probs_f32, dlogits, l, g;

	logits = t_alloc(r, t * m->vocab * 2);
	probs_f32 = t_alloc(r, t * m->vocab * 4);
	l = t_alloc(r, 256);
	dlogits = t_alloc(r, t * m->vocab * 2);
	t_free(r, probs_f32);
	t_free(r, logits);
	g = t_alloc(r, t * m->hidden * 2);
	t_free(r, dlogits);
	t_free(r, l);
	return g;
}

/* train.py's loss: F.cross_entropy(logits.float(), ...) under autocast. The script's `logits`
 * and `loss` stay alive until the next step's forward has made new ones. */
static int varlen_loss(struct run *r, const struct model *m, size_t t)
{
	size_t tv = t * m->vocab;
	int old = r->logits, f32, lsm, dnll, dlsm, dlogits, g;

	r->logits = t_alloc(r, tv * 2);
	t_free(r, old);
	f32 = t_alloc(r, tv * 4);       /* logits.float() */
	lsm = t_alloc(r, tv * 4);       /* log_softmax, saved */
	t_free(r, f32);
	t_free(r, r->loss);
	r->loss = t_alloc(r, 256);
	dnll = t_alloc(r, tv * 4);      /* nll_loss backward */
	dlsm = t_alloc(r, tv * 4);      /* log_softmax backward */
	t_free(r, dnll);
	t_free(r, lsm);
	dlogits = t_alloc(r, tv * 2);   /* back to bf16 */
	t_free(r, dlsm);
	g = t_alloc(r, t * m->hidden * 2);
	t_free(r, dlogits);
	return g;
}

static void one_step(struct run *r, const struct model *m, size_t seq, int *params, int *grads,
		     int *adam, int nparams)
{
	static struct saved sv[256];
	size_t t = m->batch * seq, h = m->hidden, ss = m->batch * m->heads * seq * seq * 2;
	/* Flash attention keeps a log-sum-exp per row instead of the probabilities, and its
	 * backward accumulates dq in fp32. */
	size_t lse = m->batch * m->heads * seq * 4;
	int x, y, g, tmp;

	/* Forward: each block keeps what its backward needs. */
	x = t_alloc(r, t * h * 2); /* embedding output */
	for (int l = 0; l < m->layers; l++) {
		struct saved *s = &sv[l];
		int scores, proj, fc2;

		s->ln1 = t_alloc(r, t * h * 2);
		s->qkv = t_alloc(r, 3 * t * h * 2);
		if (m->varlen) {
			s->probs = t_alloc(r, lse);
		} else {
			scores = t_alloc(r, ss);
			s->probs = t_alloc(r, ss);
			t_free(r, scores);
		}
		s->attn = t_alloc(r, t * h * 2);
		proj = t_alloc(r, t * h * 2);
		s->res1 = t_alloc(r, t * h * 2);
		t_free(r, proj);
		s->ln2 = t_alloc(r, t * h * 2);
		s->fc1 = t_alloc(r, 4 * t * h * 2);
		s->gelu = t_alloc(r, 4 * t * h * 2);
		fc2 = t_alloc(r, t * h * 2);
		s->res2 = t_alloc(r, t * h * 2);
		t_free(r, fc2);
		if (l == 0)
			t_free(r, x); /* the embedding output is only saved as ln1's input */
		x = s->res2;
	}
	g = m->varlen ? varlen_loss(r, m, t) : loss(r, m, t);
	for (int l = m->layers - 1; l >= 0; l--) {
		struct saved *s = &sv[l];
		int *pg = &grads[l * NPARAM], d;

		d = t_alloc(r, 4 * t * h * 2);          /* d gelu out */
		pg[P_FC2_W] = t_alloc(r, param_bytes(m, P_FC2_W));
		pg[P_FC2_B] = t_alloc(r, param_bytes(m, P_FC2_B));
		t_free(r, s->gelu);
		y = t_alloc(r, 4 * t * h * 2);          /* d fc1 out */
		t_free(r, d);
		t_free(r, s->fc1);
		pg[P_FC1_W] = t_alloc(r, param_bytes(m, P_FC1_W));
		pg[P_FC1_B] = t_alloc(r, param_bytes(m, P_FC1_B));
		d = t_alloc(r, t * h * 2);              /* d ln2 out */
		t_free(r, y);
		pg[P_LN2_W] = t_alloc(r, param_bytes(m, P_LN2_W));
		pg[P_LN2_B] = t_alloc(r, param_bytes(m, P_LN2_B));
		t_free(r, s->ln2);
		t_free(r, s->res2);
		y = t_alloc(r, t * h * 2);              /* d res1 */
		t_free(r, d);
		pg[P_O_W] = t_alloc(r, param_bytes(m, P_O_W));
		pg[P_O_B] = t_alloc(r, param_bytes(m, P_O_B));
		d = t_alloc(r, m->varlen ? t * h * 4 : ss);  /* d probs (flash: dq in fp32) */
		tmp = t_alloc(r, m->varlen ? lse : ss);      /* d scores (flash: softmax's d) */
		t_free(r, d);
		t_free(r, s->probs);
		d = t_alloc(r, 3 * t * h * 2);          /* d qkv */
		t_free(r, tmp);
		t_free(r, s->attn);
		t_free(r, s->qkv);
		pg[P_QKV_W] = t_alloc(r, param_bytes(m, P_QKV_W));
		pg[P_QKV_B] = t_alloc(r, param_bytes(m, P_QKV_B));
		tmp = t_alloc(r, t * h * 2);            /* d ln1 out */
		t_free(r, d);
		pg[P_LN1_W] = t_alloc(r, param_bytes(m, P_LN1_W));
		pg[P_LN1_B] = t_alloc(r, param_bytes(m, P_LN1_B));
		t_free(r, s->ln1);
		t_free(r, s->res1);
		t_free(r, y);
		t_free(r, g);
		g = tmp;
	}
	grads[nparams - 1] = t_alloc(r, m->vocab * h * 4); /* embedding grad */
	t_free(r, g);
	/* Adam: states at the first step; two temporaries per parameter. */
	for (int k = 0; k < nparams; k++) {
		size_t bytes = params[k] >= 0 ? r->sizes[params[k]] : 256;

		if (adam[2 * k] < 0) {
			adam[2 * k] = t_alloc(r, bytes);
			adam[2 * k + 1] = t_alloc(r, bytes);
		}
		if (m->varlen)
			continue; /* fused AdamW: no temporaries */
		x = t_alloc(r, bytes);
		y = t_alloc(r, bytes);
		t_free(r, x);
		t_free(r, y);
	}
	/* zero_grad(set_to_none=True). */
	for (int k = 0; k < nparams; k++) {
		t_free(r, grads[k]);
		grads[k] = -1;
	}
}

void train_trace(vmm_core *core, size_t budget, enum train_shape shape, int steps,
		 uint64_t seed, struct train_result *out)
{
	static struct run r;
	static int params[256 * NPARAM + 1], grads[256 * NPARAM + 1], adam[2 * (256 * NPARAM + 1)];
	struct model m;
	uint64_t rng = 0x9E3779B97F4A7C15ull + seed * 0x2545F4914F6CDD1Dull, syncs_half = 0;
	struct driver_counts calls_half = { 0 };
	size_t vbatch[VARLEN_SHAPES], vseq[VARLEN_SHAPES];
	int nparams;
	vmm_stats s;

	memset(&r, 0, sizeof(r));
	memset(out, 0, sizeof(*out));
	r.core = core;
	r.logits = r.loss = -1;
	phys_peak_start(&r.phys);
	for (int i = 0; i < MAX_T; i++)
		r.free_slots[r.nfree_slots++] = MAX_T - 1 - i;
	if (shape == TRAIN_VARLEN)
		m = (struct model){ .hidden = 1024, .vocab = 32000, .heads = 16, .batch = 16,
				    .max_seq = 2048, .layers = 8, .varlen = true };
	else
		model_for(budget, &m);
	if (m.layers > 256)
		m.layers = 256;
	nparams = m.layers * NPARAM + 1;
	params[nparams - 1] = t_alloc(&r, m.vocab * m.hidden * 4);
	for (int l = 0; l < m.layers; l++)
		for (int k = 0; k < NPARAM; k++)
			params[l * NPARAM + k] = t_alloc(&r, param_bytes(&m, k));
	for (int k = 0; k < nparams; k++) {
		grads[k] = -1;
		adam[2 * k] = adam[2 * k + 1] = -1;
	}
	for (int step = 0; step < steps; step++) {
		uint64_t calls0 = r.calls;
		struct model now = m;
		double us0;
		size_t seq;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		if (m.varlen) {
			/* train.py's shapes: 4..16 sequences of 128..2048 tokens (multiples of 8),
			 * VARLEN_SHAPES of them drawn once and played again and again, as its
			 * passes do (gpucheck times the second pass of 15). */
			if (step < VARLEN_SHAPES) {
				vbatch[step] = 4 + (size_t)(rng >> 59) % 13;
				vseq[step] = 8 * (16 + (size_t)(rng >> 20) % 241);
			}
			now.batch = vbatch[step % VARLEN_SHAPES];
			seq = vseq[step % VARLEN_SHAPES];
		} else {
			seq = m.max_seq / 8 + (size_t)(rng >> 33) % (m.max_seq - m.max_seq / 8 + 1);
			seq &= ~(size_t)63;
			if (seq < 64)
				seq = 64;
		}
		if (step == steps / 2) {
			vmm_stats_get(core, 0, NULL, &s, NULL);
			syncs_half = s.syncs;
			calls_half = driver_model_get();
		}
		us0 = driver_model_get().us;
		one_step(&r, &now, seq, params, grads, adam, nparams);
		if (step >= steps / 2 && driver_model_get().us - us0 > out->worst_step_us)
			out->worst_step_us = driver_model_get().us - us0;
		if (step == 0)
			out->allocs_per_step = (r.calls - calls0) / 2;
	}
	vmm_stats_get(core, 0, NULL, &s, NULL);
	phys_peak_finish(&r.phys);
	out->phys = r.phys;
	out->steps = steps;
	out->hidden = m.hidden;
	out->layers = (size_t)m.layers;
	out->max_seq = m.max_seq;
	out->batch = m.batch;
	out->varlen = m.varlen;
	out->peak_live = s.peak_live_bytes;
	out->peak_native = r.peak_native;
	out->peak_mapped = s.peak_mapped_bytes;
	out->end_mapped = s.mapped_bytes;
	{
		vmm_backend *be = vmm_core_backend(core);
		size_t f = 0, t = 0;

		if (be->mem_info(be, 0, &f, &t, NULL) == VMM_OK)
			out->end_driver_used = t - f;
	}
	out->syncs = s.syncs;
	out->syncs_steady = s.syncs - syncs_half;
	out->syncs_ahead = s.syncs_ahead;
	out->handles_created = s.handles_created;
	out->handles_released = s.handles_released;
	out->ns_per_call = r.calls ? r.ns / (double)r.calls : 0;
	out->failed = r.failed;
	out->steady = driver_counts_sub(driver_model_get(), calls_half);
	for (int i = 0; i < MAX_T; i++) {
		bool is_free = false;

		for (int k = 0; k < r.nfree_slots && !is_free; k++)
			is_free = r.free_slots[k] == i;
		if (!is_free)
			vmm_free(core, r.ptrs[i], NULL);
	}
}
