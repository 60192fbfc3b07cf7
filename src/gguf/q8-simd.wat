;; Q8_0 from F16 with WebAssembly SIMD: the same bytes as quants.ts's quantizeQ8_0FromF16 (gguf-py's quantizer).
;; Built into q8-wasm.ts by scripts/build-gguf-wasm.mjs (wabt's wat2wasm); the .wat is the source of truth.
;;
;; q8_from_f16(src, blocks, dst): `blocks` blocks of 32 F16 codes at `src` (64 bytes each) to 34-byte Q8_0 blocks at
;; `dst`. Per block: every code to float32 exactly ((h & 0x7fff) << 13 as float bits times 2^112 covers normals and
;; subnormals; exponent 31 is made inf/NaN), amax of the 32 magnitudes, d = amax / 127 (float32), id = 1 / d (0 when
;; d is 0), the scale stored as F16 (round to nearest even), each value v = x * id (float32) rounded half away from
;; zero (trunc, plus the sign when |v - trunc(v)| >= 0.5), saturated to int8.
(module
  (memory (export "memory") 1)

  ;; float32 bits to F16, round to nearest even (codecs/half.ts's f32BitsToF16 for the values a scale can take:
  ;; finite and non-negative, or NaN/inf).
  (func $to_f16 (param $x i32) (result i32)
    (local $abs i32) (local $sign i32) (local $r i32) (local $e i32) (local $m i32) (local $shift i32) (local $half i32)
    (local.set $sign (i32.and (i32.shr_u (local.get $x) (i32.const 16)) (i32.const 0x8000)))
    (local.set $abs (i32.and (local.get $x) (i32.const 0x7fffffff)))
    (if (i32.gt_u (local.get $abs) (i32.const 0x7f800000))
      (then (return (i32.or (i32.or (local.get $sign) (i32.const 0x7e00))
        (i32.and (i32.shr_u (local.get $abs) (i32.const 13)) (i32.const 0x3ff))))))
    (if (i32.ge_u (local.get $abs) (i32.const 0x477ff000))
      (then (return (i32.or (local.get $sign) (i32.const 0x7c00)))))
    (if (i32.ge_u (local.get $abs) (i32.const 0x38800000))
      (then
        (local.set $r (i32.sub (local.get $abs) (i32.const 0x38000000)))
        (return (i32.or (local.get $sign)
          (i32.shr_u
            (i32.add (i32.add (local.get $r) (i32.const 0xfff)) (i32.and (i32.shr_u (local.get $r) (i32.const 13)) (i32.const 1)))
            (i32.const 13))))))
    ;; subnormal or zero in F16: the mantissa with its implicit bit, shifted right with round to nearest even
    (local.set $e (i32.shr_u (local.get $abs) (i32.const 23)))
    (if (i32.lt_u (local.get $e) (i32.const 102)) (then (return (local.get $sign))))
    (local.set $m (i32.or (i32.and (local.get $abs) (i32.const 0x7fffff)) (i32.const 0x800000)))
    (local.set $shift (i32.sub (i32.const 126) (local.get $e)))
    (local.set $half (i32.shl (i32.const 1) (i32.sub (local.get $shift) (i32.const 1))))
    (i32.or (local.get $sign)
      (i32.shr_u
        (i32.add (i32.add (local.get $m) (i32.sub (local.get $half) (i32.const 1)))
          (i32.and (i32.shr_u (local.get $m) (local.get $shift)) (i32.const 1)))
        (local.get $shift))))

  ;; Constants and scratch of the inlined steps: codes to float32 ((h & 0x7fff) << 13 times 2^112, exponent 31 made
  ;; inf/NaN, the sign put back), and rounding (trunc, plus the sign when |v - trunc(v)| >= 0.5).
  (func (export "q8_from_f16") (param $src i32) (param $blocks i32) (param $dst i32)
    (local $b i32) (local $p i32) (local $o i32)
    (local $v0 v128) (local $v1 v128) (local $v2 v128) (local $v3 v128)
    (local $v4 v128) (local $v5 v128) (local $v6 v128) (local $v7 v128)
    (local $m v128) (local $amax f32) (local $d f32) (local $id f32) (local $ids v128) (local $h i32)
    (local $raw v128) (local $mag v128) (local $c v128) (local $t v128) (local $v v128)
    (local $k7fff v128) (local $k7000 v128) (local $k2p112 v128) (local $k7c00 v128) (local $k8000 v128)
    (local $khalf v128) (local $ksign v128) (local $kone v128)
    (local.set $k7fff (i32x4.splat (i32.const 0x7fff)))
    (local.set $k7000 (i32x4.splat (i32.const 0x70000000)))
    (local.set $k2p112 (i32x4.splat (i32.const 0x77800000)))
    (local.set $k7c00 (i32x4.splat (i32.const 0x7c00)))
    (local.set $k8000 (i32x4.splat (i32.const 0x8000)))
    (local.set $khalf (f32x4.splat (f32.const 0.5)))
    (local.set $ksign (i32x4.splat (i32.const 0x80000000)))
    (local.set $kone (f32x4.splat (f32.const 1)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $b) (local.get $blocks)))
        (local.set $p (i32.add (local.get $src) (i32.shl (local.get $b) (i32.const 6))))
        (local.set $o (i32.add (local.get $dst) (i32.mul (local.get $b) (i32.const 34))))
        (local.set $raw (v128.load (local.get $p)))
        (local.set $v0 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_low_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $v1 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_high_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $raw (v128.load offset=16 (local.get $p)))
        (local.set $v2 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_low_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $v3 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_high_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $raw (v128.load offset=32 (local.get $p)))
        (local.set $v4 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_low_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $v5 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_high_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $raw (v128.load offset=48 (local.get $p)))
        (local.set $v6 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_low_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $v7 (v128.or
          (v128.bitselect
            (v128.or (i32x4.shl (local.tee $mag (v128.and (local.tee $c (i32x4.extend_high_i16x8_u (local.get $raw))) (local.get $k7fff))) (i32.const 13)) (local.get $k7000))
            (f32x4.mul (i32x4.shl (local.get $mag) (i32.const 13)) (local.get $k2p112))
            (i32x4.ge_u (local.get $mag) (local.get $k7c00)))
          (i32x4.shl (v128.and (local.get $c) (local.get $k8000)) (i32.const 16))))
        (local.set $m
          (f32x4.max
            (f32x4.max (f32x4.max (f32x4.abs (local.get $v0)) (f32x4.abs (local.get $v1)))
                       (f32x4.max (f32x4.abs (local.get $v2)) (f32x4.abs (local.get $v3))))
            (f32x4.max (f32x4.max (f32x4.abs (local.get $v4)) (f32x4.abs (local.get $v5)))
                       (f32x4.max (f32x4.abs (local.get $v6)) (f32x4.abs (local.get $v7))))))
        (local.set $amax
          (f32.max (f32.max (f32x4.extract_lane 0 (local.get $m)) (f32x4.extract_lane 1 (local.get $m)))
                   (f32.max (f32x4.extract_lane 2 (local.get $m)) (f32x4.extract_lane 3 (local.get $m)))))
        (local.set $d (f32.div (local.get $amax) (f32.const 127)))
        (local.set $id (select (f32.const 0) (f32.div (f32.const 1) (local.get $d)) (f32.eq (local.get $d) (f32.const 0))))
        (local.set $ids (f32x4.splat (local.get $id)))
        (local.set $h (call $to_f16 (i32.reinterpret_f32 (local.get $d))))
        (i32.store16 (local.get $o) (local.get $h))
        (v128.store offset=2 (local.get $o)
          (i8x16.narrow_i16x8_s
            (i16x8.narrow_i32x4_s (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v0) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone)))))
                                  (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v1) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone))))))
            (i16x8.narrow_i32x4_s (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v2) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone)))))
                                  (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v3) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone))))))))
        (v128.store offset=18 (local.get $o)
          (i8x16.narrow_i16x8_s
            (i16x8.narrow_i32x4_s (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v4) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone)))))
                                  (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v5) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone))))))
            (i16x8.narrow_i32x4_s (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v6) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone)))))
                                  (i32x4.trunc_sat_f32x4_s
              (f32x4.add (local.tee $t (f32x4.trunc (local.tee $v (f32x4.mul (local.get $v7) (local.get $ids)))))
                (v128.and
                  (f32x4.ge (f32x4.abs (f32x4.sub (local.get $v) (local.get $t))) (local.get $khalf))
                  (v128.or (v128.and (local.get $v) (local.get $ksign)) (local.get $kone))))))))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (br $next))))
)
