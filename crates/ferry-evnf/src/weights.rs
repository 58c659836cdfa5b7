//! Server selection for the eLB: the weighted selection array the fast
//! path indexes with a flow hash, and the dynamic-feedback rule that turns
//! measured backend load into new weights.

use ferry_bpf::evnf::{LB_NO_BACKEND, LB_RING};

/// Fills `LB_RING` slots with backend indices, each backend getting a share
/// of slots proportional to its weight, interleaved (smooth weighted round
/// robin, as nginx orders its upstreams) so that neighbouring hashes spread
/// over backends. All weights 0: every slot is `LB_NO_BACKEND`.
pub fn selection_ring(weights: &[u32]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|w| *w as i64).sum();
    if total == 0 {
        return vec![LB_NO_BACKEND; LB_RING];
    }
    let mut current = vec![0i64; weights.len()];
    (0..LB_RING)
        .map(|_| {
            for (c, w) in current.iter_mut().zip(weights) {
                *c += *w as i64;
            }
            let best = (0..weights.len()).max_by_key(|i| (current[*i], std::cmp::Reverse(*i))).unwrap_or(0);
            current[best] -= total;
            best as u32
        })
        .collect()
}

/// Slots of `ring` per backend (for reports and tests).
pub fn slot_shares(ring: &[u32], backends: usize) -> Vec<usize> {
    let mut shares = vec![0; backends];
    for b in ring {
        if let Some(s) = shares.get_mut(*b as usize) {
            *s += 1;
        }
    }
    shares
}

/// Largest factor dynamic feedback may move a weight away from its
/// configured value, either way: feedback corrects, it does not override.
pub const FEEDBACK_RANGE: f64 = 4.0;

/// Dynamic feedback: a backend whose measured load (e.g. open connections)
/// is above its fair share for its configured weight gets a smaller
/// weight, one below it a larger weight. `load[i] / base[i]` is compared
/// with the average of that ratio; the weight moves by the inverse ratio,
/// damped by a square root so that one noisy interval cannot swing it,
/// and bounded by `FEEDBACK_RANGE`. Backends with weight 0 stay at 0; with
/// no load at all the configured weights come back.
pub fn feedback_weights(base: &[u32], load: &[f64]) -> Vec<u32> {
    const SCALE: f64 = 100.0;
    let active: Vec<usize> = (0..base.len()).filter(|i| base[*i] > 0).collect();
    let total_load: f64 = active.iter().map(|i| load.get(*i).copied().unwrap_or(0.0)).sum();
    if total_load <= 0.0 {
        return base.iter().map(|w| (*w as f64 * SCALE) as u32).collect();
    }
    let total_base: f64 = active.iter().map(|i| base[*i] as f64).sum();
    base.iter()
        .enumerate()
        .map(|(i, w)| {
            if *w == 0 {
                return 0;
            }
            // Load this backend carries relative to its fair share (1.0 = fair).
            let fair = total_load * *w as f64 / total_base;
            let relative = (load.get(i).copied().unwrap_or(0.0) / fair).max(1.0 / (FEEDBACK_RANGE * FEEDBACK_RANGE));
            let factor = (1.0 / relative).sqrt().clamp(1.0 / FEEDBACK_RANGE, FEEDBACK_RANGE);
            ((*w as f64) * SCALE * factor).round().max(1.0) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_shares_follow_weights_and_interleave() {
        let ring = selection_ring(&[1, 3]);
        assert_eq!(slot_shares(&ring, 2), vec![256, 768]);
        // Never more than 3 slots of backend 1 in a row.
        assert!(ring.windows(4).all(|w| w.contains(&0)));
        let ring = selection_ring(&[1, 0, 1]);
        assert_eq!(slot_shares(&ring, 3), vec![512, 0, 512]);
    }

    #[test]
    fn all_zero_weights_mean_no_backend() {
        assert!(selection_ring(&[0, 0]).iter().all(|b| *b == LB_NO_BACKEND));
        assert!(selection_ring(&[]).iter().all(|b| *b == LB_NO_BACKEND));
    }

    #[test]
    fn feedback_moves_weight_away_from_the_loaded_backend() {
        // Equal weights, backend 0 carries three times the load of backend 1.
        let w = feedback_weights(&[1, 1], &[30.0, 10.0]);
        assert!(w[0] < 100 && w[1] > 100, "{w:?}");
        // Fair load: configured weights.
        assert_eq!(feedback_weights(&[1, 2], &[10.0, 20.0]), vec![100, 200]);
        // No load: configured weights; weight 0 stays 0.
        assert_eq!(feedback_weights(&[2, 0], &[0.0, 5.0]), vec![200, 0]);
        // Bounded: an idle backend gets at most FEEDBACK_RANGE times its weight.
        let w = feedback_weights(&[1, 1], &[100.0, 0.0]);
        assert_eq!(w[1], (100.0 * FEEDBACK_RANGE) as u32);
        assert!(w[0] >= (100.0 / FEEDBACK_RANGE) as u32);
    }
}
