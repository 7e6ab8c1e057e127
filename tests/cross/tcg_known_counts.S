// A program whose executed instructions are known exactly, for tcg_insn_counts_test.sh: _start
// calls, 3 times, the region markers around spin (a 1000-step loop) and falls_through (one
// instruction that runs on into the next symbol's two, inside one translated block), then
// exits. Per symbol: spin 3 x (1 + 2 x 1000 + 1) = 6006; falls_through 3; landing 6;
// _start 1 + 3 x 6 + 3 = 22 (9 of them, the calls to spin, falls_through and count_off, inside
// the regions); count_on and count_off 3 each.
  .text
  .global _start
  .type _start, %function
_start:
  mov x19, #3
1:
  bl count_on
  bl spin
  bl falls_through
  bl count_off
  subs x19, x19, #1
  b.ne 1b
  mov x0, #0
  mov x8, #93  // exit
  svc #0
  .size _start, .-_start

  .global spin
  .type spin, %function
spin:
  mov x0, #1000
2:
  subs x0, x0, #1
  b.ne 2b
  ret
  .size spin, .-spin

  .global falls_through
  .type falls_through, %function
falls_through:
  add x1, x1, #1
  .size falls_through, .-falls_through
  .global landing
  .type landing, %function
landing:
  add x1, x1, #1
  ret
  .size landing, .-landing

  .global count_on
  .type count_on, %function
count_on:
  ret
  .size count_on, .-count_on

  .global count_off
  .type count_off, %function
count_off:
  ret
  .size count_off, .-count_off
