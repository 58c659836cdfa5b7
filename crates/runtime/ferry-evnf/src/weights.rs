//! Server selection for the eLB: the weighted selection array the fast
//! path indexes with a flow hash, and the dynamic-feedback rule that turns
//! measured backend load into new weights.

use ferry_bpf::hybrid::{LB_NO_BACKEND, LB_RING};

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

/// Dynamic feedback, one step: weights (×100) in force now, moved by the
/// load each backend carries (e.g. open connections) relative to its fair
/// share for its configured weight. A backend above its share loses
/// weight, one below gains; the step is the square root of the inverse
/// ratio (a damped correction, so the loop converges instead of
/// overshooting), and the result stays within `FEEDBACK_RANGE` of the
/// configured weight. Once loads match the shares the weights stay where
/// they are (the step is 1). No load at all: the configured weights come
/// back. Weight 0 stays 0.
pub fn feedback_weights(base: &[u32], current: &[u32], load: &[f64]) -> Vec<u32> {
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
            let configured = *w as f64 * SCALE;
            let now = current.get(i).copied().filter(|c| *c > 0).map_or(configured, |c| c as f64);
            // Load relative to the fair share (1.0 = fair).
            let fair = total_load * *w as f64 / total_base;
            let relative = (load.get(i).copied().unwrap_or(0.0) / fair).max(1.0 / (FEEDBACK_RANGE * FEEDBACK_RANGE));
            let next = now * (1.0 / relative).sqrt();
            next.clamp(configured / FEEDBACK_RANGE, configured * FEEDBACK_RANGE).round().max(1.0) as u32
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
        let w = feedback_weights(&[1, 1], &[100, 100], &[30.0, 10.0]);
        assert!(w[0] < 100 && w[1] > 100, "{w:?}");
        // Fair load: the weights in force stay (no swinging back).
        assert_eq!(feedback_weights(&[1, 2], &[100, 200], &[10.0, 20.0]), vec![100, 200]);
        assert_eq!(feedback_weights(&[1, 1], &[80, 130], &[10.0, 10.0]), vec![80, 130]);
        // No load: configured weights; weight 0 stays 0.
        assert_eq!(feedback_weights(&[2, 0], &[150, 0], &[0.0, 5.0]), vec![200, 0]);
        // Bounded: within FEEDBACK_RANGE of the configured weight, however long it runs.
        let mut w = vec![100, 100];
        for _ in 0..20 {
            w = feedback_weights(&[1, 1], &w, &[100.0, 0.0]);
        }
        assert_eq!(w, vec![(100.0 / FEEDBACK_RANGE) as u32, (100.0 * FEEDBACK_RANGE) as u32]);
    }

    #[test]
    fn feedback_converges_when_load_follows_weight() {
        // A toy system: connections split in proportion to weight, but
        // backend 0 holds each connection twice as long (its load doubles).
        let mut w = vec![100u32, 100];
        for _ in 0..30 {
            let share0 = w[0] as f64 / (w[0] + w[1]) as f64;
            let load = [2.0 * share0, 1.0 - share0];
            w = feedback_weights(&[1, 1], &w, &load);
        }
        let share0 = w[0] as f64 / (w[0] + w[1]) as f64;
        let (l0, l1) = (2.0 * share0, 1.0 - share0);
        assert!((l0 - l1).abs() < 0.05, "loads even out: {w:?} {l0} {l1}");
    }
}
