/* The restart rules of a launched cluster: what one task's end means for the run.
 *
 * A pure function, apart from the processes, so that each rule is a unit test. The supervisor
 * (supervise.c) asks it about every task it reaps and does what it answers.
 *
 *   - While the cluster is being stopped, an end is part of the stop.
 *   - Once training has ended well, the ps tasks (and in parameter-server training every task
 *     still running) are being told to stop: their end, however it comes, is the run's end.
 *   - A failed worker or ps task of parameter-server training is started again alone while it
 *     has restarts left (a worker rejoins, a ps restores its shards); a worker past them is left
 *     out and the chief goes on; a ps past them fails the run.
 *   - Any other failure (a chief, an evaluator, a worker of synchronous training, a ps past its
 *     restarts) stops every task, and the whole cluster starts again while it has restarts left.
 *   - A training task ending well ends training when it is parameter-server training's chief,
 *     or the last chief or worker of synchronous training to do so. */
#include "dtrain/launch.h"

dt_launch_action dt_launch_decide(const dt_launch_exit *e)
{
    bool ps_kind = e->kind == DT_LAUNCH_PS;
    bool training = e->job == DT_JOB_CHIEF || e->job == DT_JOB_WORKER;
    if (e->stopping)
        return DT_LAUNCH_CONTINUE;
    if ((e->job == DT_JOB_PS || (ps_kind && training)) && e->training_done)
        return DT_LAUNCH_CONTINUE;
    if (!e->ok) {
        if (ps_kind && (e->job == DT_JOB_WORKER || e->job == DT_JOB_PS) && !e->training_done) {
            if (e->task_restarts < e->max_restarts)
                return DT_LAUNCH_RESTART_TASK;
            if (e->job == DT_JOB_WORKER)
                return DT_LAUNCH_LEAVE_OUT;
        }
        return e->cluster_restarts < e->max_restarts ? DT_LAUNCH_RESTART_CLUSTER : DT_LAUNCH_FAIL;
    }
    if (!training)
        return DT_LAUNCH_CONTINUE;
    if (ps_kind && e->job == DT_JOB_CHIEF)
        return DT_LAUNCH_TRAINING_DONE;
    return e->training_left ? DT_LAUNCH_CONTINUE : DT_LAUNCH_TRAINING_DONE;
}

const char *dt_launch_action_name(dt_launch_action a)
{
    switch (a) {
    case DT_LAUNCH_CONTINUE:
        return "continue";
    case DT_LAUNCH_RESTART_TASK:
        return "restart task";
    case DT_LAUNCH_LEAVE_OUT:
        return "leave out";
    case DT_LAUNCH_TRAINING_DONE:
        return "training done";
    case DT_LAUNCH_RESTART_CLUSTER:
        return "restart cluster";
    case DT_LAUNCH_FAIL:
        return "fail";
    }
    return "?";
}
