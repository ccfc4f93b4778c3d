/* test-unary.c: the one-input ops (neg, scalar arithmetic, pow, exp, log,
 * sqrt, abs, clamp, relu, gelu, silu, sigmoid, tanh): values against libm
 * in double, the vectorised f32 kernels against the double reference,
 * the unit-stride paths against the strided ones (bit for bit), PyTorch's
 * gradient conventions at kinks, and finite-difference gradients. */
#include "ops-test.h"
#include "em-pool.h"

typedef struct {
  const char *name;
  em_tensor *(*fn)(em_tensor *x, const double *p);
  double (*ref)(double x, const double *p);
  double p[2];
  double lo, hi;     /* input range */
  double atol, rtol; /* f32 against the double reference */
} unary_case;

static em_tensor *u_neg(em_tensor *x, const double *p) { return em_neg(x); }
static em_tensor *u_adds(em_tensor *x, const double *p) { return em_add_scalar(x, p[0]); }
static em_tensor *u_muls(em_tensor *x, const double *p) { return em_mul_scalar(x, p[0]); }
static em_tensor *u_pow(em_tensor *x, const double *p) { return em_pow_scalar(x, p[0]); }
static em_tensor *u_exp(em_tensor *x, const double *p) { return em_exp(x); }
static em_tensor *u_log(em_tensor *x, const double *p) { return em_log(x); }
static em_tensor *u_sqrt(em_tensor *x, const double *p) { return em_sqrt(x); }
static em_tensor *u_abs(em_tensor *x, const double *p) { return em_abs(x); }
static em_tensor *u_clamp(em_tensor *x, const double *p) { return em_clamp(x, p[0], p[1]); }
static em_tensor *u_relu(em_tensor *x, const double *p) { return em_relu(x); }
static em_tensor *u_gelu(em_tensor *x, const double *p) { return em_gelu(x); }
static em_tensor *u_gelu_tanh(em_tensor *x, const double *p) { return em_gelu_tanh(x); }
static em_tensor *u_silu(em_tensor *x, const double *p) { return em_silu(x); }
static em_tensor *u_sigmoid(em_tensor *x, const double *p) { return em_sigmoid(x); }
static em_tensor *u_tanh(em_tensor *x, const double *p) { return em_tanh(x); }

static double r_neg(double x, const double *p) { return -x; }
static double r_adds(double x, const double *p) { return x + p[0]; }
static double r_muls(double x, const double *p) { return x * p[0]; }
static double r_pow(double x, const double *p) { return pow(x, p[0]); }
static double r_exp(double x, const double *p) { return exp(x); }
static double r_log(double x, const double *p) { return log(x); }
static double r_sqrt(double x, const double *p) { return sqrt(x); }
static double r_abs(double x, const double *p) { return fabs(x); }
static double r_clamp(double x, const double *p) { return fmin(fmax(x, p[0]), p[1]); }
static double r_relu(double x, const double *p) { return x > 0 ? x : 0; }
static double r_gelu(double x, const double *p) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x, const double *p) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double r_silu(double x, const double *p) { return x / (1 + exp(-x)); }
static double r_sigmoid(double x, const double *p) { return 1 / (1 + exp(-x)); }
static double r_tanh(double x, const double *p) { return tanh(x); }

static const unary_case cases[] = {
    {"neg", u_neg, r_neg, {0, 0}, -3, 3, 0, 0},
    {"add_scalar", u_adds, r_adds, {0.7, 0}, -3, 3, 1e-7, 1e-7}, /* adds (float)0.7 */
    {"mul_scalar", u_muls, r_muls, {-1.3, 0}, -3, 3, 0, 1e-7},
    {"pow2", u_pow, r_pow, {2, 0}, -3, 3, 0, 1e-7},
    {"pow3", u_pow, r_pow, {3, 0}, -3, 3, 0, 3e-7},
    {"pow0.5", u_pow, r_pow, {0.5, 0}, 0.1, 4, 0, 1e-7},
    {"pow-1", u_pow, r_pow, {-1, 0}, 0.5, 3, 0, 1e-7},
    {"pow1.7", u_pow, r_pow, {1.7, 0}, 0.1, 4, 0, 3e-7},
    {"pow-2.5", u_pow, r_pow, {-2.5, 0}, 0.5, 3, 0, 3e-7},
    {"pow0", u_pow, r_pow, {0, 0}, -3, 3, 0, 0},
    {"exp", u_exp, r_exp, {0, 0}, -10, 10, 0, 3e-7},
    {"log", u_log, r_log, {0, 0}, 0.05, 10, 1e-7, 1e-7},
    {"sqrt", u_sqrt, r_sqrt, {0, 0}, 0.05, 10, 0, 1e-7},
    {"abs", u_abs, r_abs, {0, 0}, -3, 3, 0, 0},
    {"clamp", u_clamp, r_clamp, {-0.5, 0.8}, -2, 2, 0, 0},
    {"relu", u_relu, r_relu, {0, 0}, -3, 3, 0, 0},
    {"gelu", u_gelu, r_gelu, {0, 0}, -6, 6, 1e-6, 1e-6},
    {"gelu_tanh", u_gelu_tanh, r_gelu_tanh, {0, 0}, -6, 6, 1e-6, 1e-6},
    {"silu", u_silu, r_silu, {0, 0}, -12, 12, 1e-7, 3e-7},
    {"sigmoid", u_sigmoid, r_sigmoid, {0, 0}, -12, 12, 1e-7, 3e-7},
    {"tanh", u_tanh, r_tanh, {0, 0}, -6, 6, 1e-7, 3e-7},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* f64 against libm and f32 against the double reference, over a dense
 * grid of the input range. */
static void test_forward(gconstpointer data) {
  const unary_case *c = data;
  int64_t n = 20001, shape[1] = {n};
  em_tensor *x64 = em_tensor_new(EM_DTYPE_F64, 1, shape, NULL);
  em_tensor *x32 = em_tensor_new(EM_DTYPE_F32, 1, shape, NULL);
  for (int64_t k = 0; k < n; k++) {
    float v = (float)(c->lo + (c->hi - c->lo) * (double)k / (double)(n - 1));
    em_f32(x32)[k] = v;
    em_f64(x64)[k] = v;
  }
  em_scope *s = em_scope_begin();
  em_tensor *y64 = c->fn(x64, c->p), *y32 = c->fn(x32, c->p);
  g_assert_true(y32->dtype == EM_DTYPE_F32 && y64->dtype == EM_DTYPE_F64);
  double worst = 0;
  for (int64_t k = 0; k < n; k++) {
    double xv = em_f64(x64)[k], ref = c->ref(xv, c->p);
    g_assert_cmpfloat_with_epsilon(em_f64(y64)[k], ref, 1e-14 * (1 + fabs(ref)));
    double err = fabs(em_f32(y32)[k] - ref), tol = c->atol + c->rtol * fabs(ref);
    /* a float result can be no closer than half an ulp of the value */
    tol += 0.5 * (double)(nextafterf((float)fabs(ref), INFINITY) - (float)fabs(ref));
    if (err > tol) g_error("%s(%.9g): f32 %.9g, reference %.9g", c->name, xv, em_f32(y32)[k], ref);
    if (err / (tol > 0 ? tol : 1) > worst) worst = err / (tol > 0 ? tol : 1);
  }
  if (g_test_verbose()) g_test_message("%s: worst error %.2f of tolerance", c->name, worst);
  em_scope_end(s);
  em_tensor_free(x64);
  em_tensor_free(x32);
}

static em_tensor *f_unary(em_tensor **in, void *ctx) {
  const unary_case *c = ctx;
  return c->fn(in[0], c->p);
}

static em_tensor *f_unary_view(em_tensor **in, void *ctx) {
  const unary_case *c = ctx;
  return c->fn(em_transpose(in[0], 0, 1), c->p);
}

static void test_backward(gconstpointer data) {
  const unary_case *c = data;
  int64_t shape[2] = {3, 5};
  em_tensor *in[1] = {gc_rand(EM_DTYPE_F64, 2, shape, c->lo, c->hi, 51, true)};
  ot_check_accumulates(c->name, f_unary, 1, in, (void *)c);
  ot_gradcheck(c->name, f_unary, 1, in, (void *)c, NULL);
  /* through a transposed view: the saved input is strided */
  em_tensor *in2[1] = {gc_rand(EM_DTYPE_F64, 2, shape, c->lo, c->hi, 52, true)};
  ot_gradcheck(c->name, f_unary_view, 1, in2, (void *)c, NULL);
}

/* f32: strided input (through a transposed view of a parameter) against
 * a contiguous one, forward values and gradients bit for bit; small and
 * large (threads). */
static void test_fast_vs_general(void) {
  em_set_num_threads(2);
  int64_t sizes[2][2] = {{7, 9}, {260, 270}};
  for (int z = 0; z < 2; z++)
    for (int i = 0; i < N_CASES; i++) {
      const unary_case *c = &cases[i];
      int64_t shape[2] = {sizes[z][0], sizes[z][1]}, tshape[2] = {shape[1], shape[0]};
      em_tensor *p = gc_rand(EM_DTYPE_F32, 2, tshape, c->lo, c->hi, 61, true);
      em_tensor *q = em_tensor_new(EM_DTYPE_F32, 2, shape, NULL);
      em_tensor *g = gc_rand(EM_DTYPE_F32, 2, shape, -1, 1, 62, false);
      em_tensor_set_requires_grad(q, true);
      em_scope *s = em_scope_begin();
      bool prev = em_no_grad_begin();
      em_tensor_copy_(q, em_transpose(p, 0, 1));
      em_grad_mode_restore(prev);
      /* one backward per scope: backward consumes the scope's tape */
      em_tensor *ys = c->fn(em_transpose(p, 0, 1), c->p);
      em_backward_grad(ys, g);
      em_scope *s2 = em_scope_begin();
      em_tensor *yc = c->fn(q, c->p);
      em_backward_grad(yc, g);
      ot_assert_equal(c->name, ys, yc);
      ot_assert_equal(c->name, em_transpose(p->grad, 0, 1), q->grad);
      em_scope_end(s2);
      em_scope_end(s);
      em_tensor_free(p);
      em_tensor_free(q);
      em_tensor_free(g);
    }
  em_set_num_threads(1);
}

/* Gradients at kinks and special values follow PyTorch. */
static void check_grad(em_tensor *(*fn)(em_tensor *, const double *), const double *p,
                       int n, const double *xs, const double *want_y, const double *want_g) {
  int64_t shape[1] = {n};
  em_tensor *x = ot_new(EM_DTYPE_F64, 1, shape, xs);
  em_tensor_set_requires_grad(x, true);
  em_scope *s = em_scope_begin();
  em_tensor *y = fn(x, p);
  em_backward(em_sum_all(y));
  for (int k = 0; k < n; k++) {
    if (want_y) g_assert_cmpfloat(em_f64(y)[k], ==, want_y[k]);
    g_assert_cmpfloat(em_f64(x->grad)[k], ==, want_g[k]);
  }
  em_scope_end(s);
  em_tensor_free(x);
}

static void test_kinks(void) {
  double xs[5] = {-1, 0, 2, -0.5, 0.8};
  double relu_y[5] = {0, 0, 2, 0, 0.8}, relu_g[5] = {0, 0, 1, 0, 1};
  check_grad(u_relu, NULL, 5, xs, relu_y, relu_g);
  double cl[2] = {-0.5, 0.8};
  double clamp_y[5] = {-0.5, 0, 0.8, -0.5, 0.8}, clamp_g[5] = {0, 1, 0, 1, 1};
  check_grad(u_clamp, cl, 5, xs, clamp_y, clamp_g);
  double abs_g[5] = {-1, 0, 1, -1, 1};
  check_grad(u_abs, NULL, 5, xs, NULL, abs_g);
  double p0[1] = {0}, ones[5] = {1, 1, 1, 1, 1}, zeros[5] = {0};
  check_grad(u_pow, p0, 5, xs, ones, zeros);
  double lo_only[2] = {0, INFINITY}, lo_y[5] = {0, 0, 2, 0, 0.8}, lo_g[5] = {0, 1, 1, 0, 1};
  check_grad(u_clamp, lo_only, 5, xs, lo_y, lo_g);
}

/* NaN propagates and infinities saturate, in both dtypes. */
#define SKIP 12345.0 /* not checked */
static void test_special_values(void) {
  double xs[4] = {NAN, INFINITY, -INFINITY, 0};
  int64_t shape[1] = {4};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_DTYPE_F64 : EM_DTYPE_F32;
    em_tensor *x = ot_new(dt, 1, shape, xs);
    em_scope *s = em_scope_begin();
    struct {
      em_tensor *y;
      double want[4];
    } checks[] = {
        {em_relu(x), {NAN, INFINITY, 0, 0}},
        {em_clamp(x, -1, 1), {NAN, 1, -1, 0}},
        {em_exp(x), {NAN, INFINITY, 0, 1}},
        {em_sigmoid(x), {NAN, 1, 0, 0.5}},
        {em_tanh(x), {NAN, 1, -1, 0}},
        {em_gelu(x), {NAN, INFINITY, SKIP, 0}},
        {em_abs(x), {NAN, INFINITY, INFINITY, 0}},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
      for (int k = 0; k < 4; k++) {
        double got = ot_elem(checks[i].y, k), want = checks[i].want[k];
        if (want == SKIP) continue;
        if (isnan(want) ? !isnan(got) : got != want)
          g_error("check %zu element %d (%s): %g, expected %g", i, k, em_dtype_name(dt), got, want);
      }
    em_scope_end(s);
    em_tensor_free(x);
  }
}

/* The f32 exp over its whole range, subnormal results and overflow. */
static void test_exp_range(void) {
  int64_t n = 40001, shape[1] = {n};
  em_tensor *x = em_tensor_new(EM_DTYPE_F32, 1, shape, NULL);
  for (int64_t k = 0; k < n; k++) em_f32(x)[k] = (float)(-110.0 + 200.0 * (double)k / (double)(n - 1));
  em_scope *s = em_scope_begin();
  em_tensor *y = em_exp(x);
  for (int64_t k = 0; k < n; k++) {
    double xv = em_f32(x)[k], ref = exp(xv);
    float want = (float)ref, got = em_f32(y)[k];
    if (isinf(want)) g_assert_true(isinf(got));
    else if (want < 1.1754944e-38f) g_assert_cmpfloat(fabs(got - ref), <=, 3e-45);
    else if (fabs(got - ref) > 3e-7 * ref) g_error("exp(%.9g): %.9g vs %.9g", xv, got, ref);
  }
  em_scope_end(s);
  em_tensor_free(x);
}

/* The f32 log over every binade (subnormals included): within one ulp;
 * 0 -> -inf, negative -> NaN. */
static void test_log_range(void) {
  int64_t n = 0, cap = 100000, shape[1];
  double *vals = g_new(double, cap + 3);
  for (uint32_t b = 1; b < 0x7f800000u && n < cap; b += 0x7f800000u / (uint32_t)cap + 7) {
    float f;
    memcpy(&f, &b, sizeof f);
    vals[n++] = f;
  }
  vals[n++] = 0;
  vals[n++] = -1;
  vals[n++] = INFINITY;
  shape[0] = n;
  em_tensor *x = ot_new(EM_DTYPE_F32, 1, shape, vals);
  em_scope *s = em_scope_begin();
  em_tensor *y = em_log(x);
  for (int64_t k = 0; k < n - 3; k++) {
    double ref = log((double)em_f32(x)[k]);
    double ulp = (double)(nextafterf((float)fabs(ref), INFINITY) - (float)fabs(ref));
    if (fabs(em_f32(y)[k] - ref) > ulp)
      g_error("log(%.9g): %.9g vs %.9g", (double)em_f32(x)[k], (double)em_f32(y)[k], ref);
  }
  g_assert_true(isinf(em_f32(y)[n - 3]) && em_f32(y)[n - 3] < 0);
  g_assert_true(isnan(em_f32(y)[n - 2]));
  g_assert_true(isinf(em_f32(y)[n - 1]) && em_f32(y)[n - 1] > 0);
  em_scope_end(s);
  em_tensor_free(x);
  g_free(vals);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  for (int i = 0; i < N_CASES; i++) {
    char path[96];
    g_snprintf(path, sizeof path, "/engine/ops/%s/forward", cases[i].name);
    g_test_add_data_func(path, &cases[i], test_forward);
    g_snprintf(path, sizeof path, "/engine/ops/%s/backward", cases[i].name);
    g_test_add_data_func(path, &cases[i], test_backward);
  }
  g_test_add_func("/engine/ops/unary/fast-vs-general", test_fast_vs_general);
  g_test_add_func("/engine/ops/unary/kinks", test_kinks);
  g_test_add_func("/engine/ops/unary/special-values", test_special_values);
  g_test_add_func("/engine/ops/exp/range", test_exp_range);
  g_test_add_func("/engine/ops/log/range", test_log_range);
  return g_test_run();
}
