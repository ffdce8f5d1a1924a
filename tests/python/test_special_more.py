"""tessera.scipy.special's exp1, expi, expn, dawsn, sici, fresnel, spence, bessel_jn, hyp1f1, hyp2f1, owens_t,
loggamma and bernoulli (tessera/_special_more.py) against scipy.special's values, computed in float64 and stored
below (scipy is not a dependency), over grids that reach each function's regimes (series, continued fractions,
asymptotic series, transformations, the points where they switch, poles and branch points); in float64 and
float32, under jit and vmap; and their derivatives against closed forms, scipy's values and finite differences."""
import math
from fractions import Fraction

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera.scipy import special
from finite_differences import finite_difference

GRID = {
    "exp1": [1e-08, 0.001, 0.1, 0.5, 0.999, 1.0, 1.001, 1.5, 2.0, 5.0, 10.0, 30.0, 100.0, 500.0],
    "expi": [-50.0, -5.0, -1.0, -0.001, 1e-06, 0.1, 0.3725, 1.0, 5.0, 20.0, 39.9, 40.1, 80.0, 300.0],
    "expn_n": [0, 1, 2, 3, 5, 10, 30],
    "expn_x": [0.0, 0.0001, 0.3, 1.0, 1.2, 3.0, 10.0, 60.0],
    "dawsn": [-12.0, -3.0, -0.5, -0.0001, 0.0, 0.0001, 0.1, 0.19, 0.21, 0.9241, 1.5, 3.25, 5.0, 6.25, 9.9, 10.1,
        50.0, 10000.0],
    "sici": [-30.0, -4.5, -1.0, 1e-06, 0.01, 0.5, 2.0, 3.99, 4.01, 6.0, 10.0, 50.0, 1000.0, 1000000.0],
    "fresnel": [-5.0, -1.2, 1e-05, 0.1, 0.5, 1.0, 1.49, 1.51, 2.0, 3.0, 7.5, 20.0, 100.0],
    "spence": [0.0, 1e-08, 0.01, 0.3, 0.499, 0.5, 0.9, 1.0, 1.1, 1.9, 2.0, 2.1, 5.0, 100.0, 1000000.0],
    "jn_z": [-7.5, -1.0, 0.001, 0.1, 0.5, 1.0, 2.4048, 3.0, 5.5, 10.0, 15.0, 20.0],
    "hyp1f1": [(1.0, 2.0, 0.5), (0.5, 1.5, -2.0), (2.0, 3.0, 10.0), (-3.0, 2.0, 4.0), (1.5, 2.5, -30.0), (0.3, 0.7,
        50.0), (1.0, 3.0, 150.0), (2.5, 1.5, -120.0), (-2.5, 1.0, 3.0), (3.0, 0.5, 1.0), (0.0, 2.0, 3.0), (1.0, 1.0,
        2.0), (5.0, 10.0, -5.0), (0.2, 4.0, 80.0)],
    "hyp2f1": [(1.0, 1.0, 2.0, 0.3), (0.5, 0.25, 1.5, -0.5), (1.5, 2.5, 3.7, 0.9), (0.3, 0.4, 2.0, 0.99), (1.0, 1.0,
        2.0, 0.95), (2.0, 3.0, 5.0, 0.8), (1.0, 2.0, 3.0, -3.0), (0.5, 1.5, 2.2, -20.0), (-3.0, 2.0, 1.5, 0.7),
        (-2.0, 1.5, 2.5, -4.0), (0.5, 0.5, 1.0, 0.75), (1.0, 1.0, 1.0, 0.6), (0.7, 1.3, 4.0, 1.0), (2.0, 1.0, 2.0,
        0.4), (1.2, 2.3, 2.5, 0.97), (0.25, 0.5, 0.75, -0.9), (1.0, 2.0, 1.0, 0.8), (2.0, 3.0, 4.0, -0.7), (1.5, 2.5,
        3.0, 0.9), (0.5, 1.0, 3.5, 0.95), (1.0, 2.0, 3.0, -50.0), (-2.0, 1.0, 3.0, 2.5), (0.3, 0.6, 1.9, -0.3)],
    "owens_t": [(0.0, 0.5), (0.5, 0.3), (1.0, 1.0), (2.0, -0.7), (-1.5, 2.0), (0.3, 10.0), (4.0, 0.9), (7.0, 0.2),
        (3.0, 5.0), (0.1, 0.01), (10.0, 1.5), (0.5, -30.0), (12.0, 0.5), (0.05, 3.0)],
    "loggamma": [1e-06, 0.5, 1.0, 2.5, 10.0, 150.3, 100000.0],
}

# scipy.special 1.17's values in float64 at the grids above (keys: the functions and their outputs); the
# derivatives of hyp1f1 and hyp2f1 in x by their closed forms, in a, b and c by central differences (step
# 1e-4) of scipy's values, at the *_grad_points.
REF = {
    "exp1": [17.843465089050834, 6.331539364136149, 1.8229239584193906, 0.5597735947761608, 0.21975218202294444,
        0.2193839343955205, 0.21901642252746892, 0.10001958240663265, 0.048900510708061125, 0.0011482955912753257,
        4.156968929685325e-06, 3.021552010688813e-15, 3.683597761682032e-46, 1.4220767822536385e-220],
    "expi": [-3.783264029550459e-24, -0.0011482955912753257, -0.2193839343955205, -6.331539364136149,
        -13.23829389306249, -1.6228128139692766, -2.887418318875401e-05, 1.895117816355937, 40.18527535580317,
        25615652.664056595, 5479032048901892.0, 6657825191606925.0, 7.014600004904797e+32, 6.496482508088666e+127],
    "expn": [math.inf, 9999.000049998333, 2.4693940689390597, 0.36787944117144233, 0.2509951765935018,
        0.01659568945595465, 4.539992976248485e-06, 1.45941846044942e-28, math.inf, 8.633224704574705,
        0.9056766516758468, 0.2193839343955205, 0.1584084368514626, 0.01304838109419704, 4.156968929685325e-06,
        1.4358675656812567e-28, 1.0, 0.9990366825293759, 0.4691152251789638, 0.14849550677592194,
        0.11110408769044697, 0.010641925085272832, 3.8302404656316095e-06, 1.413053686089796e-28, 0.5,
        0.4999000506657902, 0.30004182656401435, 0.1096919671977602, 0.0839346533418329, 0.008930646556022727,
        3.548762553084382e-06, 1.3909432307887193e-28, 0.25, 0.24996666916650007, 0.16893441335261664,
        0.07045423746172041, 0.0552512901878503, 0.006697984917017044, 3.089728914253686e-06, 1.348708008531087e-28,
        0.1111111111111111, 0.11109861182536904, 0.07935243728143844, 0.03639399403141639, 0.02916677777789229,
        0.00406103295098417, 2.325302657028211e-06, 1.2534274470396788e-28, 0.034482758620689655, 0.034479187377297,
        0.02527476102418865, 0.012248603640441834, 0.009959804267671655, 0.0015511845735441524,
        1.1564048916507645e-06, 9.765095478127527e-29],
    "dawsn": [-0.04181287645398826, -0.17827103061055827, -0.4244363835020223, -9.999999933333335e-05, 0.0,
        9.999999933333335e-05, 0.0993359923978529, 0.18549268702269875, 0.20393355044308947, 0.5410442238175845,
        0.42824907108539867, 0.162570914560687, 0.10213407442427686, 0.08106609406101171, 0.0507667506518047,
        0.04975125661082981, 0.010002001201201684, 5.000000025e-05],
    "si": [-1.5667565400303511, -1.654140414379244, -0.9460830703671831, 9.999999999999445e-07, 0.009999944444611112,
        0.49310741804306674, 1.605412976802695, 1.7600892984314866, 1.7563053683733343, 1.4246875512805066,
        1.658347594218874, 1.551617072485936, 1.5702331219687713, 1.570795390043119],
    "ci": [-0.03303241728207114, -0.1934911221017388, 0.33740392290096816, -13.23829489306299, -4.027979520982392,
        -0.17778407880661287, 0.422980828774865, -0.13933609432530814, -0.14260429630144628, -0.06805724389324713,
        -0.04545643300445537, -0.005628386324116305, 0.0008263155110906821, -3.499944389227205e-07],
    "fresnel_s": [-0.49919138191711687, -0.6234009185462498, 5.23598775598299e-16, 0.0005235895476122108,
        0.06473243285999929, 0.4382591473903547, 0.7011132249982798, 0.693461421915976, 0.34341567836369824,
        0.496312998967375, 0.46070123294683063, 0.4840845359259539, 0.49681690114783755],
    "fresnel_c": [-0.5636311887040122, -0.7154377229230735, 1e-05, 0.09999753262708506, 0.4923442258714464,
        0.779893400376823, 0.45458652017763695, 0.4361161680360173, 0.48825340607534073, 0.6057207892976857,
        0.5160182501523364, 0.4999873349723444, 0.4999998986788179],
    "spence": [1.6449340668482264, 1.644933872641417, 1.5886254480763753, 0.8893776242860385, 0.5836274350473903,
        0.5822405264650135, 0.1026177910993911, 0.0, -0.09760523522932167, -0.7521631792172623, -0.8224670334241142,
        -0.8908380902622821, -2.3699397969983655, -12.192421669033168, -97.07908523994166],
    "bessel_jn": [0.26633965788037844, 0.7651976865579666, 0.9999997500000156, 0.9975015620660401, 0.938469807240813,
        0.7651976865579666, 1.3268284301217434e-05, -0.2600519549019334, -0.006843869417819193, -0.24593576445134832,
        -0.014224472826780745, 0.16702466434058322, -0.13524842757970548, -0.44005058574493355,
        0.0004999999375000028, 0.049937526036242005, 0.2422684576748739, 0.44005058574493355, 0.5191530145075532,
        0.33905895852593626, -0.3414382154290434, 0.0434727461688616, 0.20510403861352275, 0.06683312417584993,
        -0.23027341052579028, 0.1149034849319005, 1.2499998958333368e-07, 0.0012489586587999192,
        0.030604023458682638, 0.1149034849319005, 0.43175071583708385, 0.4860912605858912, -0.1173154816472875,
        0.2546303136851206, 0.041571677975250444, -0.16034135192299823, 0.2580609131934603, -0.019563353982668414,
        2.083333203125009e-11, 2.0820315754756272e-05, 0.002563729994587244, 0.019563353982668414,
        0.19899521542771595, 0.3090627222552516, 0.25611786514010704, 0.05837937930518667, -0.19401825782012266,
        -0.09890139456044958, 0.023824679971022042, 0.002476638964109955, 2.604166536458329e-15,
        2.6028648545684057e-07, 0.00016073647636428756, 0.002476638964109955, 0.06474433263526137,
        0.13203418392461216, 0.39671678907285884, -0.21960268610200864, -0.11917898110329951, 0.13067093355486337,
        -0.28347390516255044, -0.00024975773021123466, 2.604166558159724e-19, 2.603081790964442e-09,
        8.053627241357477e-06, 0.00024975773021123466, 0.016388459340285967, 0.043028434877047585,
        0.3209247371476876, -0.2340615281867936, 0.13045613456502958, 0.15116976798239493, 0.3541405269123786,
        2.093833800238929e-05, 2.1701388113839425e-23, 2.169363960375998e-11, 3.360684628618851e-07,
        2.093833800238929e-05, 0.003404616717225197, 0.011393932332213062, 0.1867827330138459, -0.014458842084784946,
        0.2061497374799859, -0.0550860495636659],
    "hyp1f1": [1.2974425414002564, 0.5981440066613037, 3964.783843065208, 0.33333333333333337, 0.008090107968977321,
        4.731684239804778e+20, 1.2388529605923376e+61, -6.05744197824038e-51, 0.3694004848077712, 23.543265075467374,
        1.0, 7.38905609893065, 0.10841132531381435, 4.4176728017899617e+27],
    "hyp2f1": [1.1889164797957747, 0.9645460295154001, 6.927105040613823, 1.1022144011278192, 3.1534023932147104,
        5.074601877179903, 0.35860125308446833, 0.284491876637659, -0.07519999999999999, 12.657142857142857,
        1.3728805006183509, 2.5, 1.4475034844453052, 1.6666666666666667, 40.33799622329331, 0.8956406933374802,
        25.00000000000001, 0.44176271508465426, 14.663397526525134, 1.2235190103846127, 0.03685453949382053, 0.375,
        0.9742389294836095],
    "owens_t": [0.07379180882521663, 0.040786707344250106, 0.06674188216570097, -0.01018231203392825,
        0.033383245362167344, 0.19102983907652998, 1.5832850139763725e-05, 5.416285468063538e-13,
        0.0006749490158150479, 0.001583558497212484, 3.8099265120802914e-24, -0.15426876936299347,
        8.882410546420881e-34, 0.19819646626824855],
    "loggamma": [13.81550998074943, 0.5723649429247, 0.0, 0.2846828704729192, 12.801827480081469, 601.5119608335364,
        1051287.7089736569],
    "hyp1f1_grad_points": [(1.0, 2.0, 0.5), (0.5, 1.5, -2.0), (2.0, 3.0, 10.0), (1.5, 2.5, -30.0), (0.3, 0.7, 50.0),
        (-2.5, 1.0, 3.0), (3.0, 0.5, 1.0), (1.0, 1.0, 2.0), (5.0, 10.0, -5.0)],
    "hyp1f1_dx": [0.7025574585997436, 0.11570218085617281, 3612.336390348299, 0.0004045053984441873,
        4.6932769821756385e+20, 1.4902888089009942, 52.025446898152, 7.38905609893065, 0.042387064491705],
    "hyp1f1_da": [0.3232409123143931, -0.6688116786379705, 7502.749572465746, -0.0317629468603569,
        3.4976339449862554e+21, -1.5378398926990666, 14.057830211147149, 9.748110955385414, -0.05260698111859974],
    "hyp1f1_db": [-0.16610121241544817, 0.19104929119939662, -5911.079987074572, 0.009935505359054062,
        -2.4215238537733734e+21, -2.2336548128440437, -60.70120351292729, -9.748111079428412, 0.0236647489079006],
    "hyp2f1_grad_points": [(1.0, 1.0, 2.0, 0.3), (0.5, 0.25, 1.5, -0.5), (1.5, 2.5, 3.7, 0.9), (2.0, 3.0, 5.0, 0.8),
        (1.0, 2.0, 3.0, -3.0), (0.3, 0.6, 1.9, -0.3), (1.5, 2.5, 3.0, 0.9)],
    "hyp2f1_dx": [0.7988498292521795, 0.0609440259055552, 47.13644608048267, 20.948987932414937, 0.07240083538964585,
        0.07813124044416486, 160.36681905770638],
    "hyp2f1_da": [0.2120283594120309, -0.06729419392503821, 10.42750494929745, 4.679568951679869,
        -0.3520603149809176, -0.08397827879258468, 28.69661538827728],
    "hyp2f1_dc": [-0.11021024684310099, 0.021521954066683335, -5.889468751627547, -2.3680752830435026,
        0.08867285586605655, 0.012730721519749189, -19.388682537293533],
}

DTYPES = {"float64": tnp.float64, "float32": tnp.float32}
# Relative and absolute tolerances: float64 to a few hundred ulps (the absolute part covers values beside a
# root, expi's and Ci's and J_0's); float32 to about 200 ulps, plus what rounding the inputs to float32 moves
# the value by where the function is steep (the phases of large arguments).
TOL = {"float64": (1e-11, 1e-15), "float32": (2e-5, 2e-6)}


def arr(values, dtype):
    return tnp.asarray(np.asarray(values, np.float64), dtype=DTYPES[dtype])


def columns(points, dtype):
    return [arr(column, dtype) for column in np.asarray(points, np.float64).T]


def check(got, want, dtype, rtol=None, atol=None):
    got = np.asarray(got, np.float64).ravel()
    want = np.asarray(want, np.float64).ravel()
    r, a = TOL[dtype]
    rtol, atol = rtol or r, atol or a
    if dtype == "float32":
        # Past float32's range the value over- or underflows, as scipy's would in float32.
        keep = np.logical_or(~np.isfinite(want), (np.abs(want) < 1e37) & (np.abs(want) > 1e-37))
        keep |= want == 0
        got, want = got[keep], want[keep]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def _expn(dtype):
    n, x = np.meshgrid(GRID["expn_n"], GRID["expn_x"], indexing="ij")
    return special.expn(arr(n, dtype), arr(x, dtype))


# name -> (the function of the grid in a dtype, the reference keys of its outputs)
CASES = {
    "exp1": (lambda dt: special.exp1(arr(GRID["exp1"], dt)), ["exp1"]),
    "expi": (lambda dt: special.expi(arr(GRID["expi"], dt)), ["expi"]),
    "expn": (_expn, ["expn"]),
    "dawsn": (lambda dt: special.dawsn(arr(GRID["dawsn"], dt)), ["dawsn"]),
    "sici": (lambda dt: special.sici(arr(GRID["sici"], dt)), ["si", "ci"]),
    "fresnel": (lambda dt: special.fresnel(arr(GRID["fresnel"], dt)), ["fresnel_s", "fresnel_c"]),
    "spence": (lambda dt: special.spence(arr(GRID["spence"], dt)), ["spence"]),
    "bessel_jn": (lambda dt: special.bessel_jn(arr(GRID["jn_z"], dt), v=6), ["bessel_jn"]),
    "hyp1f1": (lambda dt: special.hyp1f1(*columns(GRID["hyp1f1"], dt)), ["hyp1f1"]),
    "hyp2f1": (lambda dt: special.hyp2f1(*columns(GRID["hyp2f1"], dt)), ["hyp2f1"]),
    "owens_t": (lambda dt: special.owens_t(*columns(GRID["owens_t"], dt)), ["owens_t"]),
    "loggamma": (lambda dt: special.loggamma(arr(GRID["loggamma"], dt)), ["loggamma"]),
}
# float32 inputs a function magnifies the rounding of: Ci and C at 1e3 and beyond (phases x and pi x^2 / 2 of
# thousands of radians), J_n beside its zeros, 1F1 and 2F1 where their parameters' rounding is amplified.
FLOAT32_TOL = {"sici": (2e-5, 2e-5), "fresnel": (2e-5, 5e-5), "bessel_jn": (2e-5, 5e-6), "hyp1f1": (1e-4, 1e-6),
               "hyp2f1": (5e-5, 1e-6), "expi": (5e-5, 2e-6), "expn": (2e-5, 2e-6)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(CASES))
def test_values_against_scipy(name, dtype):
    fn, keys = CASES[name]
    got = fn(dtype)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(keys)
    for out, key in zip(got, keys):
        assert out.dtype == DTYPES[dtype], (key, out.dtype)
        tol = FLOAT32_TOL.get(name, (None, None)) if dtype == "float32" else (None, None)
        check(out, REF[key], dtype, *tol)


def test_bessel_jn_shape_orders_and_zero():
    z = arr([[0.5, 2.0], [7.5, 0.0]], "float64")
    j = special.bessel_jn(z, v=3)
    assert j.shape == (4, 2, 2)
    np.testing.assert_allclose(np.asarray(j)[:, 1, 1], [1.0, 0.0, 0.0, 0.0])  # J_k(0)
    want = np.array(REF["bessel_jn"]).reshape(7, -1)
    zs = GRID["jn_z"]
    # J_k(-z) = (-1)^k J_k(z)
    np.testing.assert_allclose(np.asarray(j)[:, 1, 0], want[:4, zs.index(-7.5)] * [1, -1, 1, -1], rtol=1e-10)
    assert np.asarray(special.bessel_jn(np.float32(1.0), v=0)).shape == (1,)
    with pytest.raises(ValueError):
        special.bessel_jn(z, v=-1)
    with pytest.raises(ValueError):
        special.bessel_jn(z, v=60, n_iter=50)


def test_bernoulli_numbers():
    # B_n from the generating function's recurrence, in exact fractions: sum_k C(n + 1, k) B_k = 0.
    b = [Fraction(1)]
    for n in range(1, 31):
        b.append(-sum(math.comb(n + 1, k) * b[k] for k in range(n)) / (n + 1))
    got = special.bernoulli(30)
    assert got.shape == (31,) and got.dtype == tnp.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), [float(v) for v in b], rtol=1e-6)
    assert float(special.bernoulli(1)[1]) == -0.5
    assert special.bernoulli(0).shape == (1,)
    with pytest.raises(ValueError):
        special.bernoulli(-1)


def test_edges_and_domains():
    f64 = lambda v: arr(v, "float64")  # noqa: E731
    nan = math.nan
    np.testing.assert_array_equal(np.asarray(special.exp1(f64([0.0, -1.0, math.inf]))), [math.inf, nan, 0.0])
    np.testing.assert_array_equal(np.asarray(special.expi(f64([0.0]))), [-math.inf])
    np.testing.assert_array_equal(np.asarray(special.expn(f64([-1.0, 2.0, 1.0]), f64([1.0, -1.0, 0.0]))),
                                  [nan, nan, math.inf])
    np.testing.assert_array_equal(np.asarray(special.spence(f64([-0.5, 1.0]))), [nan, 0.0])
    np.testing.assert_array_equal(np.asarray(special.loggamma(f64([-1.5, 0.0]))), [nan, nan])
    si, ci = special.sici(f64([0.0, math.inf, -math.inf]))
    np.testing.assert_array_equal(np.asarray(si), [0.0, math.pi / 2, -math.pi / 2])
    np.testing.assert_array_equal(np.asarray(ci), [-math.inf, 0.0, nan])
    s, c = special.fresnel(f64([0.0, math.inf, -math.inf]))
    np.testing.assert_array_equal(np.asarray(s), [0.0, 0.5, -0.5])
    np.testing.assert_array_equal(np.asarray(c), [0.0, 0.5, -0.5])
    np.testing.assert_array_equal(np.asarray(special.dawsn(f64([0.0]))), [0.0])
    # 1F1: a = 0 is 1; a pole of b gives inf unless a non-positive integer a ends the series first.
    np.testing.assert_array_equal(np.asarray(special.hyp1f1(f64([0.0, 1.0]), f64([2.0, -3.0]), f64([5.0, 0.5]))),
                                  [1.0, math.inf])
    np.testing.assert_allclose(float(special.hyp1f1(f64(-1.0), f64(-3.0), f64(0.5))), 1 + 0.5 / 3, rtol=1e-14)
    # 2F1: inf past 1 unless a polynomial, inf at x = 1 unless c - a - b > 0, and at the poles of c.
    got = special.hyp2f1(f64([1.0, -1.0, 1.0, 1.0]), f64([1.0, 2.0, 1.0, 2.0]), f64([2.0, 3.0, 2.0, -3.0]),
                         f64([1.5, 3.0, 1.0, 0.5]))
    np.testing.assert_allclose(np.asarray(got), [math.inf, -1.0, math.inf, math.inf])
    np.testing.assert_allclose(float(special.hyp2f1(f64(-1.0), f64(2.0), f64(-3.0), f64(0.5))), 4 / 3, rtol=1e-14)
    np.testing.assert_array_equal(np.asarray(special.owens_t(f64([1.0, 0.3]), f64([0.0, 0.0]))), [0.0, 0.0])
    np.testing.assert_allclose(float(special.owens_t(f64(0.0), f64(2.0))), math.atan(2.0) / (2 * math.pi),
                               rtol=1e-14)


def test_broadcasting():
    n = arr([[1.0], [2.0], [3.0]], "float64")
    x = arr([0.5, 2.0], "float64")
    got = special.expn(n, x)
    assert got.shape == (3, 2)
    want = np.array(REF["expn"]).reshape(len(GRID["expn_n"]), -1)
    np.testing.assert_allclose(np.asarray(special.expn(2, arr(GRID["expn_x"], "float64"))),
                               want[GRID["expn_n"].index(2)], rtol=1e-12)
    assert special.hyp2f1(0.5, arr([[1.0], [2.0]], "float32"), 3.0, arr([0.1, 0.2, 0.3], "float32")).shape == (2, 3)
    assert special.hyp1f1(arr([1.0, 2.0], "float32"), 3.0, 0.5).shape == (2,)
    assert special.owens_t(arr([[0.5], [1.0]], "float32"), arr([0.1, 2.0], "float32")).shape == (2, 2)


JIT_CASES = {
    "exp1": special.exp1, "expi": special.expi, "dawsn": special.dawsn, "spence": special.spence,
    "loggamma": special.loggamma, "sici": special.sici, "fresnel": special.fresnel,
    "expn": lambda x: special.expn(3.0, x),
    "bessel_jn": lambda x: special.bessel_jn(x, v=3),
    "hyp1f1": lambda x: special.hyp1f1(0.5, 1.5, x - 3.0),
    "hyp2f1": lambda x: special.hyp2f1(0.5, 1.5, 2.2, x / 5.5 - 0.4),
    "owens_t": lambda x: special.owens_t(x - 1.0, 1.7),
}


@pytest.mark.parametrize("name", list(JIT_CASES))
def test_jit_and_vmap(name):
    fn = JIT_CASES[name]
    x = arr([0.15, 0.7, 1.2, 2.5, 4.6], "float64")
    eager = fn(x)
    flat = lambda out: [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]  # noqa: E731
    for got in (tessera.jit(fn)(x),):
        for a, b in zip(flat(got), flat(eager)):
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-300)
    batched = flat(tessera.vmap(fn)(x))
    for a, b in zip(batched, flat(eager)):
        # vmap adds the batch axis in front; bessel_jn's orders axis then comes second.
        np.testing.assert_allclose(a.T if name == "bessel_jn" else a, b, rtol=1e-14, atol=1e-300)


def _grad(fn, x):
    """d fn / d x at each point of x (float64), by tessera.grad."""
    g = tessera.grad(lambda v: fn(v))
    return np.array([float(g(arr(v, "float64"))) for v in np.ravel(x)])


def _erf(v):
    return np.vectorize(math.erf)(v)


def test_gradients_of_the_integrals():
    x = np.array([0.05, 0.7, 1.0, 2.0, 4.5, 12.0])
    np.testing.assert_allclose(_grad(special.exp1, x), -np.exp(-x) / x, rtol=1e-12)
    xi = np.array([-3.0, -0.2, 0.3, 2.0, 45.0])
    np.testing.assert_allclose(_grad(special.expi, xi), np.exp(xi) / xi, rtol=1e-12)
    # d/dx E_n = -E_(n-1), E_(n-1) from scipy's table.
    table = np.array(REF["expn"]).reshape(len(GRID["expn_n"]), -1)
    xs = np.array(GRID["expn_x"][1:])
    for n in (1, 2, 3):
        want = -table[GRID["expn_n"].index(n - 1), 1:]
        np.testing.assert_allclose(_grad(lambda v: special.expn(float(n), v), xs), want, rtol=1e-12)
    # F' = 1 - 2 x F with scipy's F.
    xd = np.array(GRID["dawsn"])
    np.testing.assert_allclose(_grad(special.dawsn, xd), 1 - 2 * xd * np.array(REF["dawsn"]), rtol=1e-11,
                               atol=1e-14)
    xt = np.array([-6.0, 0.5, 3.0, 4.5, 20.0])
    np.testing.assert_allclose(_grad(lambda v: special.sici(v)[0], xt), np.sin(xt) / xt, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(_grad(lambda v: special.sici(v)[1], xt), np.cos(xt) / xt, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(_grad(lambda v: special.sici(v)[0], [0.0]), [1.0])
    phase = np.pi * xt ** 2 / 2
    np.testing.assert_allclose(_grad(lambda v: special.fresnel(v)[0], xt), np.sin(phase), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_grad(lambda v: special.fresnel(v)[1], xt), np.cos(phase), rtol=1e-12, atol=1e-12)


def test_gradients_of_spence_loggamma_and_bessel_jn():
    # spence' = log x / (1 - x), across the three regimes (x < 1/2, [1/2, 2], x > 2).
    x = np.array([0.01, 0.3, 0.6, 1.5, 2.5, 40.0])
    np.testing.assert_allclose(_grad(special.spence, x), np.log(x) / (1 - x), rtol=1e-12)
    # loggamma' against central differences of math.lgamma.
    xg = np.array([0.3, 2.5, 17.0])
    want = [finite_difference(lambda v: math.lgamma(float(v)), v, eps=1e-5) for v in xg]
    np.testing.assert_allclose(_grad(special.loggamma, xg), np.ravel(want), rtol=1e-8)
    # J_k' = (J_(k-1) - J_(k+1)) / 2, J_0' = -J_1, from scipy's table.
    table = np.array(REF["bessel_jn"]).reshape(7, -1)
    z = np.array(GRID["jn_z"])
    for k in range(5):
        want = -table[1] if k == 0 else (table[k - 1] - table[k + 1]) / 2
        got = _grad(lambda v: special.bessel_jn(v, v=k)[k], z)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_gradients_of_the_hypergeometric_functions():
    pts = REF["hyp1f1_grad_points"]
    for i, (a, b, x) in enumerate(pts):
        g = tessera.grad(lambda a, b, x: special.hyp1f1(a, b, x), argnums=(0, 1, 2))(
            *[arr(v, "float64") for v in (a, b, x)])
        got = [float(v) for v in g]
        want = [REF["hyp1f1_da"][i], REF["hyp1f1_db"][i], REF["hyp1f1_dx"][i]]
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str((a, b, x)))
    pts = REF["hyp2f1_grad_points"]
    for i, (a, b, c, x) in enumerate(pts):
        g = tessera.grad(lambda a, c, x: special.hyp2f1(a, b, c, x), argnums=(0, 1, 2))(
            *[arr(v, "float64") for v in (a, c, x)])
        got = [float(v) for v in g]
        want = [REF["hyp2f1_da"][i], REF["hyp2f1_dc"][i], REF["hyp2f1_dx"][i]]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9, err_msg=str((a, b, c, x)))


def test_gradients_of_owens_t():
    pts = np.array([(0.5, 0.3), (2.0, -0.7), (-1.5, 2.0), (0.3, 10.0), (4.0, 0.9)])
    for h, a in pts:
        g = tessera.grad(lambda h, a: special.owens_t(h, a), argnums=(0, 1))(arr(h, "float64"), arr(a, "float64"))
        dh = -math.exp(-h * h / 2) * math.erf(a * h / math.sqrt(2)) / (2 * math.sqrt(2 * math.pi))
        da = math.exp(-(1 + a * a) * h * h / 2) / (2 * math.pi * (1 + a * a))
        np.testing.assert_allclose([float(v) for v in g], [dh, da], rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("dtype", [tnp.float16, tnp.bfloat16])
def test_half_precision_computed_in_float32(dtype):
    x = tnp.asarray(np.array([0.5, 2.0, 6.0], np.float32), dtype=dtype)
    for fn in (special.exp1, special.expi, special.dawsn, special.spence, special.loggamma):
        out = fn(x)
        assert out.dtype == dtype
        want = np.asarray(fn(tnp.asarray(np.asarray(x, np.float32))), np.float32)
        np.testing.assert_allclose(np.asarray(out, np.float32), want, rtol=1e-2)
    assert all(o.dtype == dtype for o in special.sici(x) + special.fresnel(x))
    assert special.hyp1f1(x, 2.0, x).dtype == dtype
    assert special.bessel_jn(x, v=2).dtype == dtype


def test_listed_in_the_module():
    for name in ("loggamma", "bernoulli", "exp1", "expi", "expn", "dawsn", "sici", "fresnel", "spence",
                 "bessel_jn", "hyp1f1", "hyp2f1", "owens_t"):
        assert callable(getattr(special, name)), name
        assert name in special.__doc__
