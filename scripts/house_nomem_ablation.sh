#!/bin/bash
# The no-memory ablation of the shipped house ReLIC, same recipe and budget: every step of the
# docs/house.md ReLIC recipe with model.iea=false (attention, object and place memory confined to the
# episode) and the teacher whose memory is wiped at every episode start.
#   scripts/house_nomem_ablation.sh [RUN_DIR]     (default runs/house_nomem; a step whose output exists is skipped)
# Measured on the 2-core VM beside 2-3 other jobs (2026-11-27): collection 1,754 s, offline cloning 2,439 s,
# DAgger 1,437 s; the later steps are as long as the ReLIC's. Weights: RUN_DIR/nm_ppo2/checkpoints/final.pt (house_relic's
# ablation), RUN_DIR/nm_skill/checkpoints/final.pt (house_relic_scan's)
set -e
cd "$(dirname "$0")/.."
R=${1:-runs/house_nomem}
mkdir -p "$R"
A="--set model.iea=false --set env.options.teacher=wiped"
P=.venv/bin/python
step() { [ -f "$1" ] && echo "skip $1" && return 1; return 0; }
# a PPO step cut off part-way continues from its latest checkpoint instead of starting again
start() { [ -f "$2/checkpoints/latest.pt" ] && echo "--resume $2/checkpoints/latest.pt" || echo "--init $1"; }
if step $R/nm_collect/checkpoints/final.pt; then
  $P training/imitate.py --config config/train/house_relic_imitate.yaml $A --run-dir $R/nm_collect \
    --set total_steps=163840 --beta 1 --noise 0.2 --noise-actions 1,2,3 --save-trials $R/nm_pool > $R/nm_collect.log 2>&1
fi
if step $R/nm_relic/checkpoints/final.pt; then
  $P training/imitate.py --config config/train/house_relic_objmem.yaml $A --run-dir $R/nm_relic --offline $R/nm_pool --updates 2000 > $R/nm_relic.log 2>&1
fi
if step $R/nm_dagger/checkpoints/final.pt; then
  $P training/imitate.py --config config/train/house_relic_objmem.yaml $A --run-dir $R/nm_dagger --pool $R/nm_pool \
    --beta 0.25 --updates 100 --init $R/nm_relic/checkpoints/final.pt --set total_steps=131072 > $R/nm_dagger.log 2>&1
fi
if step $R/nm_collect_n80/checkpoints/final.pt; then
  $P training/imitate.py --config config/train/house_relic_objmem.yaml $A --run-dir $R/nm_collect_n80 \
    --set total_steps=262144 --set env.options.teacher_noise=0.8 --beta 1 --noise 0.2 --noise-actions 1,2,3 --save-trials $R/nm_pool_n80 > $R/nm_collect_n80.log 2>&1
fi
if step $R/nm_pm/checkpoints/final.pt; then
  $P training/imitate.py --config config/train/house_relic_placemem.yaml $A --run-dir $R/nm_pm --offline $R/nm_pool_n80 \
    --updates 800 --set ppo.lr=0.0003 --aux-coef 1.0 --init $R/nm_dagger/checkpoints/final.pt --init-partial > $R/nm_pm.log 2>&1
fi
if step $R/nm_pm_rule.pt; then
  $P training/stop_rule.py $R/nm_pm/checkpoints/final.pt --gate 0.5 --sure 0.9 --out $R/nm_pm_rule.pt > $R/nm_rule.log 2>&1
fi
if step $R/nm_ppo/checkpoints/final.pt; then
  $P training/train.py --config config/train/house_relic_ppo.yaml --set model.iea=false $(start $R/nm_pm_rule.pt $R/nm_ppo) --run-dir $R/nm_ppo --no-progress >> $R/nm_ppo.log 2>&1
fi
if step $R/nm_ppo2/checkpoints/final.pt; then
  $P training/train.py --config config/train/house_relic_ppo.yaml --set model.iea=false $(start $R/nm_ppo/checkpoints/final.pt $R/nm_ppo2) \
    --run-dir $R/nm_ppo2 --set ppo.rollout_length=2048 --set env.num_envs=16 --set total_steps=393216 --set ppo.critic_warmup_rollouts=0 --no-progress >> $R/nm_ppo2.log 2>&1
fi
# the default's last stage on the ablation: the route memory and the route-following head on the scan (house_relic_scan's
# skill_K step with the two settings; 618 s on 2026-11-29 -> checkpoints/house_relic_scan_nomem.pt)
if step $R/nm_skill/checkpoints/final.pt; then
  $P training/imitate.py --config config/train/house_relic_ppo.yaml $A --init $R/nm_ppo2/checkpoints/final.pt --init-partial \
    --run-dir $R/nm_skill --set model.house.route_memory=true --set model.house.route_skill=64 --set model.house.scan_input=true \
    --set env.options.scan=true --set ppo.shuffle_episodes=false --set env.num_envs=16 --set ppo.rollout_length=1024 \
    --set total_steps=98304 --set threads=1 --set seed=43 --set ppo.critic_warmup_rollouts=0 \
    --set "ppo.train_only=[route_skill]" --set ppo.lr=3e-3 --teacher route --route-steps-only --replay 4 --skill-epochs 200 \
    > $R/nm_skill.log 2>&1
fi
echo done
