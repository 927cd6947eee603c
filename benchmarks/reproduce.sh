#!/usr/bin/env bash
# Regenerates every result quoted in README.md and docs/ (2 cores: the pipeline runs about 2 hours, QA, the
# benchmarks and Memory Mosaics several more; each part can be run alone by copying its lines).
# Each command is idempotent: rerun, it reuses finished stages and resumes interrupted ones.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
M=.venv/bin/mlpmem
mkdir -p runs
# The default's memory was `small` (4 blocks) with α = 0.4 until the full-length ablations below chose `tiny` with
# α = 0.2; every result measured before that switch is reproduced with OLD on the default's datastore, in
# runs/default-small-a04 (the same datastore, kNN-LM and teacher as runs/default, taken with --reuse-from)
OLD="--set memory.preset=small --set train.alpha=0.4"
# Shakespeare by play: the default (configs/default.yaml), from scratch, timed with its stage times; the README
# quotes docs/results/full-demo-avx2 (a 2-core CPU without native bf16: name the folder after the machine), timed
# with the earlier recipe (`small`, α = 0.4)
bash benchmarks/demo_walltime.sh full docs/results/full-demo-avx2
$M summarize runs/default --out docs/results/full-demo-avx2/summary.md --copy-reports docs/results/full-demo-avx2
# the quick demo (configs/quick.yaml), timed the same way; then its memory recipe, depth x α (docs/results/quick-recipe)
bash benchmarks/demo_walltime.sh quick docs/results/quick-demo-avx2
$M summarize runs/quick --out docs/results/quick-demo-avx2/summary.md --copy-reports docs/results/quick-demo-avx2
bash benchmarks/quick_recipe.sh
# The quick preset's windows were 512 tokens every 256 until commit "quick preset: windows of 1024 every 768"; the
# quick-based studies below were measured with those and run on runs/quick-w512, the quick run with them, which
# benchmarks/quick_windows.sh builds beside the current quick run (docs/results/quick-windows).
# (and with the memory the quick preset had then, OLD)
W512="--set corpus.block_size=512 --set corpus.stride=256 $OLD"
bash benchmarks/quick_windows.sh
# ... and with the full vocabulary head, the quick preset's head until the corpus head became the default
mkdir -p runs/quick-full && cp -al runs/quick-w512/{datastore,eval,teacher,knnlm,tokens} runs/quick-full/ 2>/dev/null || true
$M run configs/quick.yaml $W512 --set run_dir=runs/quick-full --set memory.vocab=full
$M run configs/wikipedia-by-article.yaml          # negative control: the backbone already knows Wikipedia
# ... and at the recipe its config had until the default took `tiny` with α = 0.2 (fp32, backbone-initialised
# `small` blocks, full head, α = 0.4)
WOLD="$OLD --set backbone.precision=fp32 --set memory.init=backbone --set train.precision=fp32"
$M run configs/wikipedia-by-article.yaml $WOLD --set memory.vocab=full --set run_dir=runs/wikipedia-by-article-small-a04
$M summarize runs/wikipedia-by-article runs/wikipedia-by-article-small-a04 --out /tmp/summary-wikipedia.md \
  --copy-reports docs/results
for s in datastore knnlm; do $M $s configs/wikipedia-within-article.yaml; done
# the default at its earlier recipe, whose memory the studies below were measured against
$M run configs/default.yaml $OLD --set run_dir=runs/default-small-a04 --reuse-from runs/default
# the default with the blocks initialised from the backbone, on the default's datastore and teacher
$M run configs/default.yaml $OLD --set run_dir=runs/default-init-backbone --set memory.init=backbone \
  --reuse-from runs/default
# tied/untied head x backbone/random init (README's table: measured at commit 57bcc69, fp32 passes)
$M ablate configs/quick.yaml $W512 --set run_dir=runs/quick-full --set memory.vocab=full --study head-init \
  --set train.epochs=1
$M summarize runs/default runs/wikipedia-within-article runs/wikipedia-by-article runs/quick \
  --out docs/results/summary.md --copy-reports docs/results
# runs/default-fp32-init-backbone is `mlpmem run configs/default.yaml` at commit 57bcc69 (fp32, backbone init)
if [ -d runs/default-fp32-init-backbone ]; then
  $M summarize runs/default-small-a04 runs/default-init-backbone runs/default-fp32-init-backbone \
    --out docs/results/init-precision/summary.md
fi
# the BIG-bench multiple-choice tasks and the selection rule's verdicts (docs/lm-eval.md)
$M tasks list --all --out docs/results/tasks-catalog
# knowledge QA, the no-regression battery and the QA-scale ablations (docs/qa.md, docs/results/qa/)
$M qa report configs/qa/report.yaml
# lm-eval multiple choice with shared contexts vs HFLM's path, on the QA suite's synthetic memory run and battery tasks
$M bench lm-eval runs/qa/synthetic/memory-run --methods backbone,memory,rag-bm25 --limit 10 \
  --tasks-dir runs/qa/battery/tasks --docs docs/results/speed
# speed (docs/speed.md, docs/results/speed/): run on an otherwise idle machine
$M bench infer configs/default.yaml $OLD --set run_dir=runs/default-small-a04 --out runs/bench/infer
$M bench infer configs/default.yaml $OLD --set run_dir=runs/default-small-a04 --methods backbone,memory,knnlm,rag,knnlm-exact \
  --out runs/bench/infer-1m
$M bench offline configs/default.yaml $OLD --set run_dir=runs/default-small-a04 --out runs/bench/offline-idle
$M bench offline configs/quick.yaml $OLD --out runs/bench/offline-fused --teacher-queries 0 --quiet
# scale (docs/scale.md, docs/results/scale/)
$M bench scale configs/quick.yaml --tokens 4096 --sizes 60000,240000 --train-steps 30 --out runs/scale-idle \
  --docs docs/results/scale
$M bench scale configs/quick.yaml --tokens 0 --sizes '' --corpus-repeats 4,16 --out runs/scale-idle --docs docs/results/scale
$M bench scale configs/quick.yaml --tokens 0 --sizes '' --corpus-repeats '' --shard-steps 10 --shard-width 4096 \
  --out runs/scale-idle --docs docs/results/scale
# Memory Mosaics v2 (docs/mosaics.md, docs/results/mosaics*/)
for c in small hour hour-more-text; do .venv/bin/memory-mosaics train $c; .venv/bin/memory-mosaics eval $c; done
for c in small hour; do .venv/bin/memory-mosaics memory $c; done
.venv/bin/memory-mosaics recall --out docs/results/mosaics-recall
# Skipped: the other variants of `bench infer` quoted in docs/speed.md (threads, ladder, idle reruns) take the
# options written next to each table there; the Memory Mosaics preset gpu needs a GPU and was not run.
# identity initialisation against random (full head) on the quick run's datastore and teacher (README)
mkdir -p runs/quick-identity && cp -al runs/quick-w512/{datastore,eval,teacher,knnlm,tokens} runs/quick-identity/ 2>/dev/null || true
$M run configs/quick.yaml $W512 --set run_dir=runs/quick-identity --set memory.vocab=full --set memory.init=identity
$M summarize runs/quick-full runs/quick-identity --out docs/results/identity-init/summary.md \
  --copy-reports docs/results/identity-init

# the corpus-vocabulary head against the full head, and the generalisation levers, on the quick run (README)
mkdir -p runs/quick-corpus && cp -al runs/quick-w512/{datastore,eval,teacher,knnlm,tokens} runs/quick-corpus/ 2>/dev/null || true
$M run configs/quick.yaml $W512 --set run_dir=runs/quick-corpus --set memory.vocab=corpus
$M ablate configs/quick.yaml $W512 --set run_dir=runs/quick-corpus --set memory.vocab=corpus --study vocab
$M ablate configs/quick.yaml $W512 --set run_dir=runs/quick-corpus --set memory.vocab=corpus --set train.epochs=6 \
  --set train.eval_every=0.5 --set train.patience=3 --study regularise
$M summarize runs/quick-full runs/quick-corpus --out docs/results/corpus-head/summary.md --copy-reports docs/results/corpus-head
$M bench offline configs/quick.yaml $W512 --out runs/bench/offline-vocab --teacher-queries 0 --quiet
cp runs/bench/offline-vocab/bench-report.md docs/results/speed/offline-vocab.md
cp runs/bench/offline-vocab/bench-results.json docs/results/speed/offline-vocab-results.json
# quality against the training corpus's size (same recipe, nested training caps, the default's validation and test)
$M scale-data configs/default.yaml $OLD --set memory.vocab=corpus --train-tokens 40000,80000,120000 --out runs/data-scaling
mkdir -p docs/results/data-scaling && cp runs/data-scaling/{report.md,results.json,data_scaling.png} docs/results/data-scaling/
$M ablate configs/default.yaml $OLD --set run_dir=runs/data-scaling/runs/train-120000 \
  --set corpus.max_tokens.train=120000 --study vocab
# the default's recipe ablated at full length (README "The default's recipe, ablated at full length"), measured on
# the earlier recipe's run (in the reports its row is `default`, the folder's name then)
D=docs/results/default-ablations
A="$OLD --set run_dir=runs/default-small-a04"
$M ablate configs/default.yaml $A --study epochs --out $D/epochs
$M ablate configs/default.yaml $A --study size --variant tiny --variant small --out $D/size
$M ablate configs/default.yaml $A --study alpha --variant alpha=0.2 --variant alpha=0.4 --out $D/alpha
$M ablate configs/default.yaml $A --study regularise --variant none --variant "key noise 0.1" --variant "dropout 0.1" \
  --variant "weight decay 0.1" --out $D/regularise
$M ablate configs/default.yaml $A --study teacher --variant "k=1024" --variant "k=1024, T=1" --out $D/teacher
# ... and on test (seeded: trained anew, the variants' memories are the ablation's)
$M run configs/default.yaml --set run_dir=runs/default-alpha02 --set memory.preset=small --set train.alpha=0.2 \
  --reuse-from runs/default
$M run configs/default.yaml --set run_dir=runs/default-tiny --set memory.preset=tiny --set train.alpha=0.4 \
  --reuse-from runs/default
$M run configs/default.yaml --set run_dir=runs/default-tiny-alpha02 --set memory.preset=tiny --set train.alpha=0.2 \
  --reuse-from runs/default
$M summarize runs/default-small-a04 runs/default-alpha02 runs/default-tiny runs/default-tiny-alpha02 \
  --out $D/test/summary.md --copy-reports $D/test
# a second seed of the earlier recipe and of tiny + α = 0.2
$M run configs/default.yaml $OLD --set run_dir=runs/default-seed1 --set train.seed=1 --reuse-from runs/default
$M run configs/default.yaml --set run_dir=runs/default-tiny-alpha02-seed1 --set memory.preset=tiny --set train.alpha=0.2 \
  --set train.seed=1 --reuse-from runs/default
$M summarize runs/default-seed1 runs/default-tiny-alpha02-seed1 --out $D/test-seed1/summary.md --copy-reports $D/test-seed1
# the memory's size at the shipped recipe (tiny, α = 0.2: runs/default itself)
$M ablate configs/default.yaml --study size --out $D/size-recipe
# the key layer and the seed's share (4 seeds and their memories averaged) at the shipped recipe
$M ablate configs/default.yaml --study layer --variant layer=0.8 --variant layer=1.0 --out $D/layer
$M ablate configs/default.yaml --study seeds --out $D/seeds
$M ablate configs/default.yaml --study teacher --out $D/teacher-recipe
# one memory trained against the seeds' memories averaged (needs the seeds study)
$M ablate configs/default.yaml --study distil --out $D/distil
# the learned gate on the quick run (docs/results/gate): the key-projection variant first, then the default gate
MLPMEM_THREADS=1 $M gate configs/quick.yaml $W512 --set run_dir=runs/quick-corpus --set memory.vocab=corpus \
  --set gate.key_dim=4 --name quick-corpus+key4 --decode-tokens 16 --decode-rounds 21 --report docs/results/gate --quiet
MLPMEM_THREADS=1 $M gate configs/quick.yaml $W512 --set run_dir=runs/quick-corpus --set memory.vocab=corpus \
  --decode-tokens 16 --decode-rounds 21 --report docs/results/gate --quiet
# the negative control with the corpus head
# (the recipe the config had then: WOLD above)
$M run configs/wikipedia-by-article.yaml $WOLD --set run_dir=runs/wikipedia-by-article-corpus --set memory.vocab=corpus
# the gate on the full default, and the gate against the fixed λ on QA and the no-regression checks
MLPMEM_THREADS=1 $M gate configs/default.yaml --decode-tokens 16 --decode-rounds 21 --report docs/results/gate --quiet
MLPMEM_THREADS=1 $M gate configs/wikipedia-by-article.yaml $WOLD --set run_dir=runs/wikipedia-by-article-corpus \
  --set memory.vocab=corpus \
  --decode-tokens 0 --report docs/results/gate --quiet
$M qa report configs/qa/gate.yaml --no-ablations
# the question gate with PMI's unconditional terms as negatives: at the best-F1 offset, at the one-standard-error
# offset without and with them, and with disfl_qa (docs/qa.md, "Closing the gate where PMI looks"); one run folder,
# each command rescoring only the gate
$M qa report configs/qa/gate-unconditional.yaml --no-ablations
$M qa report configs/qa/gate-unconditional.yaml --set gate_offset_rule=one_se --set gate_negatives_unconditional=false \
  --set docs_dir=docs/results/qa-gate-one-se-conditional --no-ablations
$M qa report configs/qa/gate-unconditional.yaml --set gate_offset_rule=one_se --set docs_dir=docs/results/qa-gate-one-se \
  --no-ablations
$M qa report configs/qa/gate-unconditional.yaml --set gate_offset_rule=one_se \
  --set 'benchmarks.disfl_qa={pipeline: configs/qa-disfl_qa.yaml, options: {max_paragraphs: 100, heldout_paragraphs: 10}, tune_questions: 100, test_questions: 300}' \
  --set docs_dir=docs/results/qa-gate-one-se-disfl --no-ablations --no-battery
# the default (corpus head) as the fourth size of the data-scaling series: its run folder linked in, reused
[ -e runs/data-scaling/runs/train-all ] || cp -al runs/default-small-a04 runs/data-scaling/runs/train-all
$M scale-data configs/default.yaml $OLD --train-tokens 40000,80000,120000,0 --out runs/data-scaling
cp runs/data-scaling/{report.md,results.json,data_scaling.png} docs/results/data-scaling/
$M summarize runs/default --out /tmp/summary-default.md --copy-reports docs/results
# the same recipe up to all the shipped Shakespeare: 35 training plays (~1.42M tokens; the default's 8 plays are its
# first 307,620 tokens), the default's validation and test plays; hours on 2 cores, every stage resumes
$M scale-data configs/default.yaml $OLD --set corpus.options.n_train=35 --train-tokens 40000,80000,120000,307620,0 \
  --out runs/data-scaling-35 --quiet
mkdir -p docs/results/data-scaling-35 && cp runs/data-scaling-35/{report.md,results.json,data_scaling.png} docs/results/data-scaling-35/
$M summarize runs/data-scaling-35/runs/train-* --copy-reports docs/results/data-scaling-35
# update / forget / explain on synthetic facts, 120 entities (docs/results/update-120)
MLPMEM_THREADS=1 $M update-study configs/maintenance/study.yaml --out runs/update-study --quiet
# ... with the replayed positions taught the memory's own earlier distribution (docs/results/update-replay)
MLPMEM_THREADS=1 $M update-study configs/maintenance/study.yaml --out runs/update-study-replay --quiet \
  --set "maintenance=[update.replay_targets=memory]" --set docs_dir=docs/results/update-replay
# a Shakespeare run updated with plays it did not see (docs/results/update-text), on the quick run of its time
$M update-text runs/quick-w512 --out runs/update-text --docs docs/results/update-text
# ... at other settings and sizes (docs/results/update-lr, update-early-stop, update-early-stop-lr,
# update-early-stop-lr4, update-480-lr, update-160-converged, update-480-sweep; the last three: docs/maintenance.md)
S=configs/maintenance/study.yaml
LR="update.lr=0.001,update.replay_ratio=2,forget.replay_ratio=2"
$M update-study $S --out runs/update-study-lr --set "maintenance=[update.lr=0.001]" --set docs_dir=docs/results/update-lr
$M update-study $S --out runs/update-study-early --set "pipeline_set=[]" --set docs_dir=docs/results/update-early-stop
$M update-study $S --out runs/update-study-early-lr-paired --set "pipeline_set=[]" --set "maintenance=[$LR]" \
  --set docs_dir=docs/results/update-early-stop-lr --quiet
$M update-study $S --out runs/update-study-early-lr4 --set "pipeline_set=[]" \
  --set "maintenance=[$LR,update.epochs=4,forget.lr=0.0001]" --set docs_dir=docs/results/update-early-stop-lr4 --quiet
$M update-study $S --out runs/update-study-480-lr --set "pipeline_set=[]" --set "synthetic.num_entities=480" \
  --set questions=2000 --set "maintenance=[$LR]" --set docs_dir=docs/results/update-480-lr --quiet
$M update-study $S --out runs/update-study-160-conv --set "pipeline_set=[train.patience=null]" \
  --set "synthetic.num_entities=160" --set questions=2000 --set "maintenance=[$LR]" \
  --set docs_dir=docs/results/update-160-converged --quiet
$M update-study $S --out runs/update-study-480-sweep --set "pipeline_set=[train.patience=null]" \
  --set "synthetic.num_entities=480" --set questions=2000 --set "maintenance=[$LR,update.epochs=6]" \
  --set "update_variants={epochs-2: [update.epochs=2], epochs-4: [update.epochs=4], epochs-10: [update.epochs=10]}" \
  --set docs_dir=docs/results/update-480-sweep --quiet
# every old position replayed (docs/results/update-480-replay3)
$M update-study $S --out runs/update-study-480-replay3 --set "pipeline_set=[train.patience=null]" \
  --set "synthetic.num_entities=480" --set questions=2000 \
  --set "maintenance=[update.lr=0.001,update.replay_ratio=3,forget.replay_ratio=2,update.epochs=8]" \
  --set "update_variants={r3-e6: [update.epochs=6]}" --set docs_dir=docs/results/update-480-replay3 --quiet
# more recipes on that study's kept first run, against its retrained memory (from_study: nothing rebuilt):
# on480 OUT DOCS MAINTENANCE [more options]
on480() {
  $M update-study $S --out "runs/$1" --set "pipeline_set=[train.patience=null]" --set "synthetic.num_entities=480" \
    --set questions=2000 --set "maintenance=[$3]" --set from_study=runs/update-study-480-replay3 \
    --set "docs_dir=docs/results/$2" --quiet "${@:4}"
}
R1="update.lr=0.001,update.replay_ratio=1,forget.replay_ratio=2"
on480 update-sweep-480-replay1 update-480-replay1 "$R1" \
  --set "update_variants={r1-e8: [update.epochs=8], r1-e12: [update.epochs=12]}"
on480 update-sweep-480-replay1-e10 update-480-replay1-e10 "$R1" --set "update_variants={r1-e10: [update.epochs=10]}"
# a fresh replay share every epoch (update.replay_draw=epoch; docs/results/update-480-fresh, -fresh16), the best
# recipe at two more seeds (-fresh-replicates), and the whole table with it and a longer forget (-fresh-table)
on480 update-sweep-480-fresh update-480-fresh "$R1,update.replay_draw=epoch" \
  --set "update_variants={fresh-r1-e8: [update.epochs=8], fresh-r1-e12: [update.epochs=12]}"
FRESH="update.lr=0.001,update.replay_draw=epoch,forget.replay_ratio=2,update.epochs=16"
on480 update-sweep-480-fresh16 update-480-fresh16 "$FRESH" \
  --set "update_variants={fresh-r1-e16: [update.replay_ratio=1], fresh-r05-e16: [update.replay_ratio=0.5]}"
on480 update-sweep-480-fresh-replicates update-480-fresh-replicates "$FRESH,update.replay_ratio=0.5" \
  --set "update_variants={fresh-r05-e16-seed1: [seed=1], fresh-r05-e16-seed2: [seed=2]}"
on480 update-table-480-fresh update-480-fresh-table \
  "$FRESH,update.replay_ratio=0.5,forget.replay_draw=epoch,forget.epochs=4" --set from_study_table=true
# 20 epochs at three seeds (-fresh20); the whole table with it and a six-epoch forget, the recipe again at three
# seeds (update_seeds) and the retrained memory at two more training seeds (retrain_seeds): the table until the
# forget was given probes (docs/results/update-480-forget15)
FRESH20="update.lr=0.001,update.replay_draw=epoch,forget.replay_ratio=2,update.epochs=20,update.replay_ratio=0.5"
on480 update-sweep-480-fresh20 update-480-fresh20 "$FRESH20" \
  --set "update_variants={fresh-r05-e20-seed0: [seed=0], fresh-r05-e20-seed1: [seed=1], fresh-r05-e20-seed2: [seed=2]}"
on480 update-table-480-fresh20 update-480-forget15 "$FRESH20,forget.replay_draw=epoch,forget.epochs=6" \
  --set from_study_table=true --set "update_variants={fresh-r05-e20: []}" --set "update_seeds=[0, 1, 2]" \
  --set "retrain_seeds=[1, 2]"
# the table's recipe with twice the forgotten entities, no extra seeds (docs/results/update-480-forget30); these
# four forgets without probes set what the preset has set since (probes, the forget's rate) back
$M update-study configs/maintenance/study-480.yaml --out runs/update-table-480-forget30 --set forget_fraction=0.3 \
  --set forget_probes=false --set "maintenance=[update.lr=0.001,update.replay_ratio=0.5,update.replay_draw=epoch,update.epochs=20,forget.replay_ratio=2,forget.replay_draw=epoch,forget.epochs=6]" \
  --set "update_seeds=[]" --set "retrain_seeds=[]" --set from_study=runs/update-study-480-replay3 \
  --set from_study_table=true --set docs_dir=docs/results/update-480-forget30 --quiet
# the same with the forget at the memory's own rate (docs/results/update-480-forget30-lr)
$M update-study configs/maintenance/study-480.yaml --out runs/update-table-480-forget30-lr --set forget_fraction=0.3 \
  --set forget_probes=false \
  --set "update_seeds=[]" --set "retrain_seeds=[]" --set "update_variants={}" \
  --set "maintenance=[update.lr=0.001,update.replay_ratio=0.5,update.replay_draw=epoch,update.epochs=20,forget.replay_ratio=2,forget.replay_draw=epoch,forget.epochs=6,forget.lr=0.001]" \
  --set from_study=runs/update-study-480-replay3 --set from_study_table=true \
  --set docs_dir=docs/results/update-480-forget30-lr --quiet
# the same, the forgotten positions taught the teacher without them: a whole study, the source of the two after it
# (docs/results/update-480-forget30-teacher)
$M update-study configs/maintenance/study-480.yaml --out runs/update-study-480-forget30-teacher --set forget_fraction=0.3 \
  --set forget_probes=false \
  --set "update_seeds=[]" --set "retrain_seeds=[]" --set "update_variants={}" \
  --set "maintenance=[update.lr=0.001,update.replay_ratio=0.5,update.replay_draw=epoch,update.epochs=20,forget.replay_ratio=2,forget.replay_draw=epoch,forget.epochs=6,forget.lr=0.001,forget.target=teacher]" \
  --set docs_dir=docs/results/update-480-forget30-teacher --quiet
# the forget at the memory's rate with probes in a wording no scored question uses, and without them; both also ask
# the forgotten entities in their documents' words (docs/results/update-480-forget30-probes, -docform)
$M update-study configs/maintenance/study-480.yaml --out runs/update-table-480-forget30-probes --set forget_fraction=0.3 \
  --set forget_probes=true --set "update_seeds=[]" --set "retrain_seeds=[]" --set "update_variants={}" \
  --set "maintenance=[update.lr=0.001,update.replay_ratio=0.5,update.replay_draw=epoch,update.epochs=20,forget.replay_ratio=2,forget.replay_draw=epoch,forget.epochs=6,forget.lr=0.001]" \
  --set from_study=runs/update-study-480-forget30-teacher --set from_study_table=true \
  --set docs_dir=docs/results/update-480-forget30-probes --quiet
$M update-study configs/maintenance/study-480.yaml --out runs/update-table-480-forget30-docform --set forget_fraction=0.3 \
  --set forget_probes=false \
  --set "update_seeds=[]" --set "retrain_seeds=[]" --set "update_variants={}" \
  --set "maintenance=[update.lr=0.001,update.replay_ratio=0.5,update.replay_draw=epoch,update.epochs=20,forget.replay_ratio=2,forget.replay_draw=epoch,forget.epochs=6,forget.lr=0.001]" \
  --set from_study=runs/update-study-480-forget30-teacher --set from_study_table=true \
  --set docs_dir=docs/results/update-480-forget30-docform --quiet
# the table (docs/results/update): the preset from scratch, with the forget that met its row (30 % forgotten,
# probes, the memory's rate), the update at three seeds and the retrained memory at three
$M update-study configs/maintenance/study-480.yaml --out runs/update-study-480 --quiet
# lm-eval scoring on the 480-entity study's retrained run (after its evaluation): one backbone pass for backbone,
# memory and kNN-LM (docs/results/lm-eval-one-pass), bf16 against fp32 (docs/results/lm-eval-precision); and the
# study's multiple-choice scorer with shared contexts (docs/results/choice-scoring)
$M eval runs/update-study-480-lr/runs/retrained/config.yaml
$M bench lm-eval runs/update-study-480-lr/runs/retrained --methods backbone,memory,knnlm --limit 20 --repeats 1 \
  --one-pass-only --docs runs/bench/lm-eval-one-pass
cp runs/bench/lm-eval-one-pass/lm-eval-contexts.json docs/results/lm-eval-one-pass/results.json
$M eval runs/update-study-480-sweep/runs/retrained/config.yaml
$M bench lm-eval runs/update-study-480-sweep/runs/retrained --methods backbone,memory,knnlm --limit 20 --repeats 1 \
  --compare-precision bf16 --profile --docs runs/bench/lm-eval-precision-cached
cp runs/bench/lm-eval-precision-cached/lm-eval-precision.json docs/results/lm-eval-precision/results.json
# (docs/results/lm-eval-precision-profile: the same command at commit 91ce15a, before frozen weights' casts were cached)
# a corpus-head memory at commit 624f43b and at HEAD (docs/results/lm-eval-precision-corpus-head; `src` of 624f43b
# from `git archive 624f43b src` on PYTHONPATH for the first)
$M bench lm-eval runs/qa-gate-unconditional/synthetic/memory-run --methods backbone,memory --limit 20 --repeats 1 \
  --compare-precision bf16 --docs runs/bench/corpus-head-after
python benchmarks/choice_scoring.py runs/update-study-480-lr/runs/retrained --questions 200 --entities 480 \
  --repeats 2 --out docs/results/choice-scoring
# QA answers generated at fp32 and at bf16, on the 480-entity sweep's first run as the study left it (updated, then
# forgotten from) (docs/results/generation-precision)
python benchmarks/generation_precision.py runs/update-study-480-sweep/runs/updated --questions 100 --repeats 1 \
  --out docs/results/generation-precision
